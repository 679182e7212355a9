// Command testreport runs `go test -json` and turns its event stream back
// into go test's own closing lines, with skipped tests listed by name.
// Under CI=true a skipped test is a failure: every service the suite needs
// is installed by `make test`, so a skip there means a check did not run.
//
// Usage: testreport [go test flags] [packages]
//
// `make test` builds it first and runs the binary: `go run` would add its
// own "exit status 1" after the closing line CI reads.
//
// It prints one line per package (`ok  pkg 1.2s`, `FAIL pkg 3.4s`), the
// whole output of every failed test (and of a package that crashed or timed
// out, naming the tests that were still running), the skipped tests with
// their reasons, and ends with `N passed, N failed, N skipped`. It exits
// non-zero when a test failed, go test itself failed (a build error), or
// under CI=true anything was skipped.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
)

func main() {
	os.Exit(run("", os.Args[1:], os.Getenv("CI") == "true", os.Stdout, os.Stderr))
}

// run runs go test -json with args in dir and reports on w; it returns the
// exit status.
func run(dir string, args []string, ci bool, w, stderr io.Writer) int {
	cmd := exec.Command("go", append([]string{"test", "-json"}, args...)...)
	cmd.Dir, cmd.Stderr = dir, stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(stderr, "testreport:", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "testreport:", err)
		return 2
	}
	r := newReport(w, ci)
	if err := r.read(out); err != nil {
		fmt.Fprintln(stderr, "testreport: reading go test -json:", err)
	}
	if !r.finish(cmd.Wait() != nil) {
		return 1
	}
	return 0
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events
	Test       string
	Elapsed    float64
	Output     string
}

// pkgState is what one package has reported so far; go test interleaves
// packages, so each is printed as one block when it ends.
type pkgState struct {
	output  map[string][]string // test name ("" for the package) -> output lines
	order   []string            // tests in the order they started
	running []string            // tests started and not ended
	failed  map[string]bool
	// raced are passed tests whose output holds a race report: the race
	// detector fails the tests running when it fires, but prints the
	// report in whichever test's output the racing goroutine wrote to.
	raced map[string]bool
}

type skip struct{ pkg, test, reason string }

type report struct {
	w      io.Writer
	ci     bool
	pkgs   map[string]*pkgState
	build  map[string][]string // import path -> build output
	passed int
	failed int
	skips  []skip
	// pkgFailed counts packages that ended in FAIL (a crash or timeout
	// may fail a package without a failed test event).
	pkgFailed int
}

func newReport(w io.Writer, ci bool) *report {
	return &report{w: w, ci: ci, pkgs: map[string]*pkgState{}, build: map[string][]string{}}
}

func (r *report) pkg(name string) *pkgState {
	p := r.pkgs[name]
	if p == nil {
		p = &pkgState{output: map[string][]string{}, failed: map[string]bool{}, raced: map[string]bool{}}
		r.pkgs[name] = p
	}
	return p
}

// read consumes the event stream; a line that is not JSON (go test prints
// some errors on stdout) is passed through as it is.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Action == "" {
			fmt.Fprintln(r.w, sc.Text())
			continue
		}
		r.event(ev)
	}
	return sc.Err()
}

func (r *report) event(ev event) {
	switch ev.Action {
	case "build-output":
		r.build[ev.ImportPath] = append(r.build[ev.ImportPath], ev.Output)
		return
	case "build-fail":
		for _, l := range r.build[ev.ImportPath] {
			fmt.Fprint(r.w, l)
		}
		return
	}
	p := r.pkg(ev.Package)
	switch ev.Action {
	case "output":
		p.output[ev.Test] = append(p.output[ev.Test], ev.Output)
	case "run":
		p.running = append(p.running, ev.Test)
		p.order = append(p.order, ev.Test)
	case "pass", "fail", "skip":
		if ev.Test == "" {
			r.endPackage(ev)
			return
		}
		p.running = slices.DeleteFunc(p.running, func(s string) bool { return s == ev.Test })
		switch ev.Action {
		case "pass":
			r.passed++
			if slices.ContainsFunc(p.output[ev.Test], func(l string) bool { return strings.Contains(l, "WARNING: DATA RACE") }) {
				p.raced[ev.Test] = true
				break
			}
			delete(p.output, ev.Test)
		case "fail":
			r.failed++
			p.failed[ev.Test] = true
		case "skip":
			r.skips = append(r.skips, skip{ev.Package, ev.Test, skipReason(p.output[ev.Test])})
			delete(p.output, ev.Test)
		}
	}
}

// skipReason is the message a test gave t.Skip: the output lines between
// its RUN line and its SKIP line.
func skipReason(lines []string) string {
	var why []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		why = append(why, t)
	}
	return strings.Join(why, " ")
}

// endPackage prints the package's block: its failed tests' output, then
// go test's one-line result.
func (r *report) endPackage(ev event) {
	p := r.pkg(ev.Package)
	delete(r.pkgs, ev.Package)
	switch ev.Action {
	case "skip": // no test files
		fmt.Fprintf(r.w, "?   \t%s\t[no test files]\n", ev.Package)
		return
	case "pass":
		fmt.Fprintf(r.w, "ok  \t%s\t%.3fs\n", ev.Package, ev.Elapsed)
		return
	}
	r.pkgFailed++
	for _, name := range p.order {
		if p.failed[name] || p.raced[name] {
			for _, l := range p.output[name] {
				fmt.Fprint(r.w, l)
			}
		}
	}
	// Tests still running when the package failed: a timeout or a crash
	// (the panic is in the package's own output), so each failed too.
	for _, name := range p.running {
		r.failed++
		for _, l := range p.output[name] {
			fmt.Fprint(r.w, l)
		}
		fmt.Fprintf(r.w, "--- FAIL: %s (unfinished: the test binary timed out or crashed)\n", name)
	}
	// The package's own output ends with go test's "FAIL\tpkg\t1.2s"
	// (or "[build failed]"); a killed go test never wrote one.
	own := false
	for _, l := range p.output[""] {
		if strings.TrimSpace(l) == "FAIL" {
			continue
		}
		own = own || strings.HasPrefix(l, "FAIL\t"+ev.Package)
		fmt.Fprint(r.w, l)
	}
	if !own {
		fmt.Fprintf(r.w, "FAIL\t%s\t%.3fs\n", ev.Package, ev.Elapsed)
	}
}

// finish prints the skipped tests and the summary; it reports whether the
// run passed. goTestFailed is go test's own exit status.
func (r *report) finish(goTestFailed bool) bool {
	// A package that never ended (go test was killed) is a failure too.
	for _, name := range slices.Sorted(maps.Keys(r.pkgs)) {
		r.endPackage(event{Action: "fail", Package: name})
	}
	failed, skipped := r.failed, len(r.skips)
	if len(r.skips) > 0 {
		fmt.Fprintln(r.w)
		verdict := "--- SKIP"
		if r.ci {
			verdict = "--- FAIL"
			failed, skipped = failed+skipped, 0
			fmt.Fprintf(r.w, "%d tests skipped under CI=true, where every check must run:\n", len(r.skips))
		} else {
			fmt.Fprintf(r.w, "%d tests skipped (tolerated without CI=true):\n", len(r.skips))
		}
		for _, s := range r.skips {
			fmt.Fprintf(r.w, "%s: %s (%s): %s\n", verdict, s.test, s.pkg, s.reason)
		}
	}
	ok := failed == 0 && r.pkgFailed == 0 && !goTestFailed
	if !ok {
		fmt.Fprintln(r.w, "FAIL")
		if failed == 0 {
			failed = r.pkgFailed // a build failure: count the package
			if failed == 0 {
				failed = 1
			}
		}
	}
	fmt.Fprintf(r.w, "%d passed, %d failed, %d skipped\n", r.passed, failed, skipped)
	return ok
}
