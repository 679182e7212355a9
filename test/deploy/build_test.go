package deploy

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// buildModule lays out a module shaped like this one (cmd/gateway,
// cmd/sandgate-sandbox, packages of its own) around a copy of
// scripts/build.sh, so the real script runs the real go toolchain in
// seconds; lib is internal/lib's source. internal/big, which the gateway
// imports too, takes a moment to compile: the counter must show the
// packages done before it while it compiles, not when the build ends.
func buildModule(t *testing.T, lib string) string {
	t.Helper()
	dir := t.TempDir()
	script, err := os.ReadFile(repoPath("scripts", "build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	// A comment of this run's own in each source file: the same sources
	// built before (an earlier run on this machine) would be build cache
	// hits, which go build -v does not list, and there would be no
	// counter to see.
	nonce := fmt.Sprintf("\n// %s %d\n", t.Name(), time.Now().UnixNano())
	for name, data := range map[string]string{
		"scripts/build.sh":             string(script),
		"go.mod":                       "module example.com/sg\n\ngo 1.26\n",
		"internal/lib/lib.go":          lib,
		"internal/big/big.go":          bigPackage(),
		"cmd/gateway/main.go":          "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/sg/internal/big\"\n\t\"example.com/sg/internal/lib\"\n)\n\nvar version, revision string\n\nfunc main() { fmt.Println(version, revision, lib.X+big.F0(0)) }\n",
		"cmd/sandgate-sandbox/main.go": "package main\n\nfunc main() {}\n",
	} {
		if strings.HasSuffix(name, ".go") {
			data += nonce
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// bigPackage is a package of 3000 small functions: about a second of
// compiling on a quiet 2-core machine.
func bigPackage() string {
	var b strings.Builder
	b.WriteString("package big\n\n")
	for i := range 3000 {
		fmt.Fprintf(&b, "func F%d(x int) int {\n\tif x > %d {\n\t\treturn x * %d\n\t}\n\treturn x - %d\n}\n\n", i, i, i, i)
	}
	return b.String()
}

type line struct {
	at   time.Duration
	text string
}

// runBuild runs the copied script and returns its stderr lines, each with
// the time it arrived since the start, and the exit error.
func runBuild(t *testing.T, dir string) ([]line, error) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(dir, "scripts", "build.sh"))
	cmd.Env = append(os.Environ(), "BINDIR="+filepath.Join(dir, "out"), "VERSION=v1.2.3-build", "REVISION=abc123")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []line
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		lines = append(lines, line{time.Since(start), sc.Text()})
	}
	return lines, cmd.Wait()
}

// TestBuildTalks: scripts/build.sh (make build, make run, the image
// builds) says what it does before the toolchain has done anything, counts
// the packages it compiles out of the total, passes a compile error
// through with a failing status, and builds both binaries with the
// shipped flags.
func TestBuildTalks(t *testing.T) {
	t.Parallel()
	dir := buildModule(t, "package lib\n\nconst X = 42\n")
	lines, err := runBuild(t, dir)
	if err != nil {
		t.Fatalf("build: %v\n%v", err, lines)
	}
	if len(lines) == 0 || lines[0].text != "building Sandgate (first time: a few minutes)…" {
		t.Fatalf("the banner is not the first line: %v", lines)
	}
	// At once: before go has resolved anything (the first run was
	// silent for minutes).
	if lines[0].at > 5*time.Second {
		t.Errorf("banner after %v", lines[0].at)
	}
	counter := regexp.MustCompile(`^  compiling 1/(\d+): example\.com/sg/`)
	var first *line
	for i, l := range lines {
		if m := counter.FindStringSubmatch(l.text); m != nil && m[1] != "1" {
			first = &lines[i]
		}
	}
	if first == nil {
		t.Fatalf("no package counter out of the total: %v", lines)
	}
	// Shown as it happens: a printer that holds its input back (mawk on a
	// pipe did) shows it only as the build ends.
	if gap := lines[len(lines)-1].at - first.at; gap < 250*time.Millisecond {
		t.Errorf("the first package was shown %v before the build ended, while internal/big compiled: %v", gap, lines)
	}
	last := lines[len(lines)-1].text
	if !strings.HasPrefix(last, "built "+filepath.Join(dir, "out", "gateway")+" and ") || !strings.Contains(last, "(v1.2.3-build)") {
		t.Errorf("last line %q", last)
	}
	out, err := exec.Command(filepath.Join(dir, "out", "gateway")).Output()
	if err != nil || string(out) != "v1.2.3-build abc123 42\n" {
		t.Errorf("the built gateway printed %q (%v), want the stamped version", out, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "sandgate-sandbox")); err != nil {
		t.Errorf("no sandbox server beside the gateway: %v", err)
	}
	info, err := exec.Command("go", "version", "-m", filepath.Join(dir, "out", "gateway")).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"build\t-trimpath=true", "build\tCGO_ENABLED=0"} {
		if !bytes.Contains(info, []byte(want)) {
			t.Errorf("the binary was not built with %q:\n%s", want, info)
		}
	}

	t.Run("a compile error passes through and fails", func(t *testing.T) {
		t.Parallel()
		dir := buildModule(t, "package lib\n\nconst X = nope\n")
		lines, err := runBuild(t, dir)
		if err == nil {
			t.Fatalf("a broken build succeeded: %v", lines)
		}
		var text []string
		for _, l := range lines {
			text = append(text, l.text)
		}
		all := strings.Join(text, "\n")
		if !strings.Contains(all, "internal/lib/lib.go:3:11: undefined: nope") || strings.Contains(all, "built ") {
			t.Errorf("output:\n%s", all)
		}
	})
}

// TestOneWayToTheBinary: make build and make run go through
// scripts/build.sh, and both image builds copy what it built rather than
// compile the gateway again with flags of their own.
func TestOneWayToTheBinary(t *testing.T) {
	t.Parallel()
	_, err := exec.LookPath("make")
	testutil.Require(t, err == nil, "make")
	for target, want := range map[string]string{
		"build": "./scripts/build.sh\n",
		"run":   "./scripts/build.sh && exec bin/gateway \n",
	} {
		// Under make test this runs inside make, which would have the inner
		// make print the directories it enters.
		cmd := exec.Command("make", "--no-print-directory", "-n", target)
		cmd.Dir = testutil.ModuleRoot()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("make -n %s: %v", target, err)
		}
		if !strings.HasSuffix(string(out), want) || strings.Contains(string(out), "go build") {
			t.Errorf("make -n %s: %q, want it to end in %q", target, out, want)
		}
	}
	read := func(parts ...string) string {
		data, err := os.ReadFile(repoPath(parts...))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	script := read("scripts", "build.sh")
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w -X main.version=`} {
		if !strings.Contains(script, want) {
			t.Errorf("scripts/build.sh lacks %q", want)
		}
	}
	goBuild := regexp.MustCompile(`(?m)^[^#]*\bgo build\b`)
	dockerfile := read("Dockerfile")
	if goBuild.MatchString(dockerfile) || !strings.Contains(dockerfile, "\nCOPY bin/gateway /rootfs/gateway\n") {
		t.Error("the root Dockerfile compiles the gateway instead of copying make build's bin/gateway")
	}
	if ignore := read(".dockerignore"); !strings.Contains(ignore, "\n!bin/gateway\n") {
		t.Error(".dockerignore keeps bin/gateway out of the build context")
	}
	buildSh := read("deployments", "gateway-image", "build.sh")
	if goBuild.MatchString(buildSh) || !strings.Contains(buildSh, " build BINDIR=") {
		t.Error("deployments/gateway-image/build.sh compiles the gateway instead of running make build")
	}
}

// TestREADMEFirstCommands: the README opens with the command that runs the
// gateway (make run, which talks while it builds) and make test, says how
// long command 1 takes, and names make build as the way to get the binary.
func TestREADMEFirstCommands(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(repoPath("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	block := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(readme)
	if block == nil {
		t.Fatal("README has no sh block")
	}
	var cmds []string
	for _, l := range strings.Split(block[1], "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			cmds = append(cmds, strings.Fields(l)[0]+" "+strings.Fields(l)[1])
		}
	}
	if len(cmds) < 2 || cmds[0] != "make run" || cmds[len(cmds)-1] != "make test" {
		t.Errorf("README's first block runs %v, want make run first and make test last", cmds)
	}
	top := readme[:strings.Index(readme, "## Walk-through")]
	for _, want := range []string{"make build", "bin/gateway", "empty Go caches"} {
		if !strings.Contains(top, want) {
			t.Errorf("README's top section lacks %q", want)
		}
	}
}
