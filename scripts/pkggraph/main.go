// Command pkggraph prints the module's package graph as docs/ARCHITECTURE.md
// shows it: one line per package under internal/ and cmd/, with the
// module's packages it imports directly (tests left out). The block in
// ARCHITECTURE.md between the pkggraph markers is this output; the test
// beside this file fails when the two differ.
//
// Usage: go run ./scripts/pkggraph [-w docs/ARCHITECTURE.md]
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

const (
	module = "github.com/sandgate/sandgate/"
	begin  = "<!-- pkggraph: begin (go run ./scripts/pkggraph -w docs/ARCHITECTURE.md) -->"
	end    = "<!-- pkggraph: end -->"
)

func main() {
	write := flag.String("w", "", "replace the graph block of this Markdown file instead of printing it")
	flag.Parse()
	if err := run(*write, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pkggraph:", err)
		os.Exit(1)
	}
}

func run(path string, w io.Writer) error {
	graph, err := build(".")
	if err != nil {
		return err
	}
	if path == "" {
		_, err := io.WriteString(w, graph)
		return err
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	updated, err := replace(string(doc), graph)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(updated), 0o644)
}

// build lists the module's packages from dir (the module root, or any
// directory in it) and what each imports of the module.
func build(dir string) (string, error) {
	cmd := exec.Command("go", "list", "-json", "github.com/sandgate/sandgate/internal/...", "github.com/sandgate/sandgate/cmd/...")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list: %w", err)
	}
	var b strings.Builder
	b.WriteString("```\n")
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			return "", err
		}
		var deps []string
		for _, imp := range p.Imports {
			if rest, ok := strings.CutPrefix(imp, module); ok {
				deps = append(deps, short(rest))
			}
		}
		line := short(strings.TrimPrefix(p.ImportPath, module))
		if len(deps) > 0 {
			line += " → " + strings.Join(deps, ", ")
		}
		b.WriteString(line + "\n")
	}
	b.WriteString("```\n")
	return b.String(), nil
}

// short drops internal/: every package but the commands lives there.
func short(path string) string { return strings.TrimPrefix(path, "internal/") }

// replace puts graph between the markers of doc.
func replace(doc, graph string) (string, error) {
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("no %q … %q block", begin, end)
	}
	return doc[:i+len(begin)] + "\n" + graph + doc[j:], nil
}
