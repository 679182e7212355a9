// Command filegraph measures how a package's files depend on each other:
// file A depends on file B when A uses something declared in B (a
// function, type, method, field, variable or constant). A package reads
// well when its files form layers, each using only those below it; an
// edge that runs back up a layer makes two files one unit to understand.
//
// Usage: filegraph [-v] packages...
//
// For each package it prints its non-test files, the edges between them,
// and "back up": the fewest edges whose removal leaves the file graph
// without cycles (a greedy feedback arc set, Eades–Lin–Smyth), i.e. the
// edges that run back up whatever layering the files are read in. -v lists
// them with the symbols that make each one.
//
// Types come from the compiler's export data (go list -export), so the
// count is exact for what the type checker resolves.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
)

type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	DepOnly    bool
}

func main() {
	verbose := flag.Bool("v", false, "list the back-up edges and the symbols behind them")
	flag.Parse()
	if err := run(flag.Args(), *verbose, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "filegraph:", err)
		os.Exit(1)
	}
}

func run(patterns []string, verbose bool, w io.Writer) error {
	out, err := exec.Command("go", append([]string{"list", "-export", "-deps", "-json"}, patterns...)...).Output()
	if err != nil {
		return fmt.Errorf("go list: %w", err)
	}
	exports := map[string]string{}
	var targets []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return err
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly {
			targets = append(targets, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	for _, p := range targets {
		if err := report(fset, imp, p, verbose, w); err != nil {
			return fmt.Errorf("%s: %w", p.ImportPath, err)
		}
	}
	return nil
}

type edge struct{ from, to string }

func report(fset *token.FileSet, imp types.Importer, p listed, verbose bool, w io.Writer) error {
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	pkg, err := (&types.Config{Importer: imp}).Check(p.ImportPath, fset, files, info)
	if err != nil {
		return err
	}
	why := map[edge]map[string]bool{}
	add := func(at token.Pos, obj types.Object) {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			return
		}
		if _, local := obj.(*types.Var); local && obj.Parent() != nil && obj.Parent() != pkg.Scope() {
			return // a local variable or parameter
		}
		from, to := filepath.Base(fset.Position(at).Filename), filepath.Base(fset.Position(obj.Pos()).Filename)
		if from == to {
			return
		}
		e := edge{from, to}
		if why[e] == nil {
			why[e] = map[string]bool{}
		}
		why[e][obj.Name()] = true
	}
	for id, obj := range info.Uses {
		add(id.Pos(), obj)
	}
	back := feedbackArcs(p.GoFiles, why)
	fmt.Fprintf(w, "%s: %d files, %d edges, %d back up\n", p.ImportPath, len(p.GoFiles), len(why), len(back))
	if verbose {
		for _, e := range back {
			names := slices.Sorted(func(yield func(string) bool) {
				for n := range why[e] {
					if !yield(n) {
						return
					}
				}
			})
			fmt.Fprintf(w, "  %s -> %s %v\n", e.from, e.to, names)
		}
	}
	return nil
}

// feedbackArcs orders the files by Eades, Lin and Smyth's greedy heuristic
// (sinks to the end, sources to the front, then the file with the most
// out minus in) and returns the edges that point backwards in that order.
func feedbackArcs(files []string, edges map[edge]map[string]bool) []edge {
	out, in := map[string]map[string]bool{}, map[string]map[string]bool{}
	for _, f := range files {
		out[f], in[f] = map[string]bool{}, map[string]bool{}
	}
	for e := range edges {
		out[e.from][e.to], in[e.to][e.from] = true, true
	}
	left := map[string]bool{}
	for _, f := range files {
		left[f] = true
	}
	remove := func(f string) {
		delete(left, f)
		for t := range out[f] {
			delete(in[t], f)
		}
		for s := range in[f] {
			delete(out[s], f)
		}
	}
	var front, back []string
	for len(left) > 0 {
		for changed := true; changed; {
			changed = false
			for _, f := range sortedKeys(left) {
				switch {
				case len(out[f]) == 0: // uses nothing left: lowest layer
					back = append(back, f)
					remove(f)
					changed = true
				case len(in[f]) == 0: // nothing left uses it: top layer
					front = append(front, f)
					remove(f)
					changed = true
				}
			}
		}
		if len(left) == 0 {
			break
		}
		best, score := "", -1<<31
		for _, f := range sortedKeys(left) {
			if d := len(out[f]) - len(in[f]); d > score {
				best, score = f, d
			}
		}
		front = append(front, best)
		remove(best)
	}
	slices.Reverse(back)
	order := map[string]int{}
	for i, f := range append(front, back...) {
		order[f] = i
	}
	var arcs []edge
	for e := range edges {
		if order[e.from] > order[e.to] {
			arcs = append(arcs, e)
		}
	}
	sort.Slice(arcs, func(i, j int) bool {
		if arcs[i].from != arcs[j].from {
			return arcs[i].from < arcs[j].from
		}
		return arcs[i].to < arcs[j].to
	})
	return arcs
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
