// Command bench runs Sandgate's benchmark suites and writes docs/BENCHMARKS.md.
//
//	go run ./bench                      # every suite (make bench)
//	go run ./bench -suite a,b           # some suites; the doc keeps the others' last results
//	go run ./bench -quick -out DIR -doc DIR/BENCHMARKS.md   # shorter runs (make bench-quick)
//	go run ./bench -suite ''            # no suite: regenerate the doc and chart from the JSON files
//
// Each suite writes bench/results/<name>.json; the doc, its Goals table and
// the latency chart beside it are then regenerated from every JSON file
// there, so suites can run separately and the doc stays whole. Benchmarks are
// not timed tests: nothing here passes or fails on a number, the numbers are
// reported with the machine they came from.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Result is what a suite reports; the harness fills in Name, Command, Machine and Quick.
type Result struct {
	Name    string     `json:"name"`
	Title   string     `json:"title"`
	Command string     `json:"command"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
	Notes   []string   `json:"notes"`
	// Figures are the numbers the Goals table and the chart are computed
	// from, by key (see goals.go); the table above is for people.
	Figures map[string]float64 `json:"figures,omitempty"`
	// Tables are further tables, rendered after the first; Series are
	// samples over time by name, kept for whoever reads the JSON.
	Tables  []Table              `json:"tables,omitempty"`
	Series  map[string][]float64 `json:"series,omitempty"`
	Machine Machine              `json:"machine"`
	// Quick marks a -quick run: fewer samples, shorter wrk runs.
	Quick bool `json:"quick,omitempty"`
}

// Table is a further table of a result.
type Table struct {
	Title   string     `json:"title"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Machine is where a result was measured.
type Machine struct {
	CPU       string    `json:"cpu"`
	Cores     int       `json:"cores"`
	OS        string    `json:"os"`
	GoVersion string    `json:"go_version"`
	Date      time.Time `json:"date"`
	// Load is /proc/loadavg's 1, 5 and 15 minute averages when the suite
	// finished: numbers from a busy machine say so.
	Load string `json:"load,omitempty"`
}

// Suite measures one thing and returns a table.
type Suite func(ctx context.Context) (Result, error)

// suites is the registry; each suite file registers itself in init.
var suites = map[string]Suite{}

func register(name string, s Suite) { suites[name] = s }

// suiteOrder is the order of a whole run: what the goals and the
// chart need first, so a run cut short by -timeout on a busy machine
// loses the least of them.
var suiteOrder = []string{"proxy-throughput", "lifecycle", "process-cold-create", "docker-cold-create", "go-bench",
	"replicas", "threads-10k", "tracing", "scale", "freeze", "checkpoint", "resume", "templates", "preview-links", "kube", "density", "sampler", "webhooks"}

// suiteNames are the registered suites in run order; one missing from
// suiteOrder runs last.
func suiteNames() []string {
	names := slices.Clone(suiteOrder)
	for _, n := range slices.Sorted(maps.Keys(suites)) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return slices.DeleteFunc(names, func(n string) bool { _, ok := suites[n]; return !ok })
}

// settings size the suites. They are chosen once, before any suite runs.
type settings struct {
	Quick bool
	// ProxyWarmup is the unmeasured wrk run per target and cell;
	// ProxyMeasure the measured time per target, split into ProxyRounds
	// rounds for the fast workloads.
	ProxyWarmup, ProxyMeasure time.Duration
	ProxyRounds               int
	LifecycleRuns             int // cached acquires and warm reclaims
	LifecycleColdRuns         int // new threads through one gateway
	ColdCreateRuns            int // process backend creates
	DockerColdRuns            int // docker backend creates (and CLI references)
	DockerWarmRuns            int // docker warm reclaims per gateway
	ReplicaThreads            int // new threads over three replicas
	ScaleThreads              int // threads driven through one gateway, records for the reaper
	// ScaleRecords are the thread records the scale suite seeds into each
	// cluster; ScaleReplicas the simulated replicas driving it for
	// ScaleDuration.
	ScaleRecords, ScaleReplicas int
	ScaleDuration               time.Duration
	GoBenchCount                int // go test -count
	GoBenchTime                 string
	FreezeRuns                  int // freezes and thaws per backend
	CheckpointRuns              int // checkpoints, restores and forks per method
	ResumeRuns                  int // exec streams cut and resumed, per row
	KubeRuns                    int // kubernetes backend creates, freeze rounds and gateway first requests
	// DensityMax bounds the live sandboxes of the density suite, which
	// adds DensityStep at a time until a limit is met
	// (-density-max, -density-step).
	DensityMax, DensityStep int
	// DensityPidMax, when set, is kernel.pid_max for the density run
	// (root; restored after), and DensityNoFile the RLIMIT_NOFILE the
	// gateway is started with: the two host limits an operator raises for
	// thousands of sandboxes (-density-pid-max, -density-nofile).
	DensityPidMax, DensityNoFile int
	// DensityHold keeps sweeping the last step's sandboxes this long
	// before the teardown, each sweep's figures to stderr: a window to
	// profile the steady state in (-density-hold).
	DensityHold time.Duration
	// PairedBlocks incarnations, of PairedRounds rounds of PairedRound
	// each, compare the gateway's CPU with the floor on its server
	// (bench/proxy_paired.go).
	PairedBlocks, PairedRounds int
	PairedRound                time.Duration
}

var (
	fullSettings = settings{ProxyWarmup: time.Second, ProxyMeasure: 4 * time.Second, ProxyRounds: 4,
		LifecycleRuns: 200, LifecycleColdRuns: 30, ColdCreateRuns: 50, DockerColdRuns: 20, DockerWarmRuns: 30,
		ReplicaThreads: 30, ScaleThreads: 10_000, GoBenchCount: 5, GoBenchTime: "1s",
		ScaleRecords: 1_000_000, ScaleReplicas: 50, ScaleDuration: 20 * time.Second, FreezeRuns: 50, CheckpointRuns: 10, ResumeRuns: 30, KubeRuns: 20,
		DensityMax: 5_000, DensityStep: 250, PairedBlocks: 4, PairedRounds: 4, PairedRound: 2 * time.Second}
	quickSettings = settings{Quick: true, ProxyWarmup: time.Second, ProxyMeasure: 2 * time.Second, ProxyRounds: 2,
		LifecycleRuns: 50, LifecycleColdRuns: 10, ColdCreateRuns: 15, DockerColdRuns: 5, DockerWarmRuns: 10,
		ReplicaThreads: 9, ScaleThreads: 2_000, GoBenchCount: 3, GoBenchTime: "200ms",
		ScaleRecords: 100_000, ScaleReplicas: 50, ScaleDuration: 5 * time.Second, FreezeRuns: 15, CheckpointRuns: 3, ResumeRuns: 10, KubeRuns: 5,
		DensityMax: 200, DensityStep: 50, PairedBlocks: 1, PairedRounds: 2, PairedRound: time.Second}
	// opts is the run's settings; the suites read it, run sets it.
	opts = fullSettings
	// resultsDir is -out: a suite that compares itself with others reads
	// their last results there.
	resultsDir = "bench/results"
)

// defaultTimeout bounds the suites of `make bench`: every suite measured
// in full takes about 30 minutes on the 2-core machine (8 of them the scale
// suite's 1 M records, seeded twice; 3 the templates suite's; 3.5 the kube
// suite's real node, last, the first cut on a busy machine);
// the rest is margin for a busy one,
// and 2 minutes of the make target's 32 are left for its builds and the
// cleanup after a suite that was stopped.
const defaultTimeout = 30 * time.Minute

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	names := suiteNames()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	suiteFlag := fs.String("suite", strings.Join(names, ","), "comma-separated suites to run: "+strings.Join(names, ", "))
	out := fs.String("out", "bench/results", "directory of result JSON files")
	doc := fs.String("doc", "docs/BENCHMARKS.md", "markdown file regenerated from every result in -out; the chart goes beside it")
	quick := fs.Bool("quick", false, "shorter runs and fewer samples (a smoke run of the harness, not figures to publish)")
	timeout := fs.Duration("timeout", defaultTimeout, "bound on the whole run: suites still running then are stopped, the doc is regenerated from what finished")
	densityMax := fs.Int("density-max", 0, "density suite: stop at this many live sandboxes (0: 5000, 200 with -quick)")
	densityStep := fs.Int("density-step", 0, "density suite: sandboxes added per step (0: 250, 50 with -quick)")
	densityPidMax := fs.Int("density-pid-max", 0, "density suite: set kernel.pid_max to this for the run and restore it after (root; 0: leave it)")
	densityNoFile := fs.Int("density-nofile", 0, "density suite: start the gateway with this RLIMIT_NOFILE (root past the hard limit; 0: inherited)")
	densityHold := fs.Duration("density-hold", 0, "density suite: after the last step, keep sweeping its sandboxes this long (figures to stderr), a window to profile in")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *quick {
		opts = quickSettings
	}
	if *densityMax > 0 {
		opts.DensityMax = *densityMax
	}
	if *densityStep > 0 {
		opts.DensityStep = *densityStep
	}
	opts.DensityPidMax, opts.DensityNoFile, opts.DensityHold = *densityPidMax, *densityNoFile, *densityHold
	resultsDir = *out
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	defer removeGatewayBuild()

	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	began := time.Now()
	var errs []error
	for _, name := range strings.Split(*suiteFlag, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		s, ok := suites[name]
		if !ok {
			return fmt.Errorf("unknown suite %q (have: %s)", name, strings.Join(names, ", "))
		}
		if ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("suite %s: not run: %w", name, context.Cause(ctx)))
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: running %s (%s into the run)\n", name, time.Since(began).Round(time.Second))
		res, err := s(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("suite %s: %w", name, err))
			continue
		}
		res.Name, res.Command, res.Machine, res.Quick = name, suiteCommand(name), machine(), opts.Quick
		if err := writeJSON(filepath.Join(*out, name+".json"), res); err != nil {
			return err
		}
	}
	head := collectHeader(context.WithoutCancel(ctx), "go run ./bench "+strings.Join(args, " "), time.Since(began))
	if err := writeDoc(*out, *doc, head); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s in %s\n", *doc, time.Since(began).Round(time.Second))
	return errors.Join(errs...)
}

// suiteCommand reruns one suite the way it was run.
func suiteCommand(name string) string {
	cmd := "go run ./bench -suite " + name
	if opts.Quick {
		cmd = "go run ./bench -quick -suite " + name
	}
	if base := map[bool]settings{false: fullSettings, true: quickSettings}[opts.Quick]; name == "density" &&
		(opts.DensityMax != base.DensityMax || opts.DensityStep != base.DensityStep) {
		cmd += fmt.Sprintf(" -density-max %d -density-step %d", opts.DensityMax, opts.DensityStep)
	}
	if name == "density" && opts.DensityPidMax > 0 {
		cmd += fmt.Sprintf(" -density-pid-max %d", opts.DensityPidMax)
	}
	if name == "density" && opts.DensityNoFile > 0 {
		cmd += fmt.Sprintf(" -density-nofile %d", opts.DensityNoFile)
	}
	return cmd
}

func writeJSON(path string, res Result) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func machine() Machine {
	return Machine{CPU: cpuModel(), Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		GoVersion: runtime.Version(), Date: time.Now().UTC(), Load: loadAvg()}
}

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// Shared helpers for suites.

// gatewayBuild is the run's one gateway binary: every suite measures the
// same build, and a tree that changes during the run cannot change it.
var gatewayBuild struct {
	once      sync.Once
	dir, path string
	err       error
}

// buildGateway builds the gateway as shipped, once per run: make build's
// scripts/build.sh (its flags, cmd/sandgate-sandbox beside it) into a
// directory of the run's own, so that after `make bench`'s build every
// package is a cache hit.
func buildGateway(ctx context.Context) (string, error) {
	g := &gatewayBuild
	g.once.Do(func() {
		root, err := moduleRoot(ctx)
		if err != nil {
			g.err = err
			return
		}
		if g.dir, g.err = os.MkdirTemp("", "sandgate-bench-bin-"); g.err != nil {
			return
		}
		g.path = filepath.Join(g.dir, "gateway")
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "build.sh"))
		cmd.Env = append(os.Environ(), "BINDIR="+g.dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			g.err = fmt.Errorf("scripts/build.sh: %w\n%s", err, out)
		}
	})
	return g.path, g.err
}

// removeGatewayBuild deletes the binary once no suite runs.
func removeGatewayBuild() {
	if gatewayBuild.dir != "" {
		_ = os.RemoveAll(gatewayBuild.dir)
	}
}

func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		return "", fmt.Errorf("find module root: %v", err)
	}
	return filepath.Dir(string(bytes.TrimSpace(out))), nil
}

// Stats summarises samples by nearest-rank percentiles.
type Stats struct {
	N                  int
	P50, P90, P99, Max time.Duration
}

func summarize(samples []time.Duration) Stats {
	s := slices.Clone(samples)
	slices.Sort(s)
	return Stats{N: len(s), P50: percentile(s, 50), P90: percentile(s, 90), P99: percentile(s, 99), Max: percentile(s, 100)}
}

// percentile is the nearest-rank percentile of sorted samples (0 for none).
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

// ms formats a duration in milliseconds with two decimals.
func ms(d time.Duration) string {
	if d > 0 && d < 100*time.Microsecond { // sub-0.1 ms figures keep their digits
		return fmt.Sprintf("%.4f", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond))
}

// msF is d in milliseconds, for figures.
func msF(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// statsRow is a table row: label, n, then p50/p90/p99/max in ms.
func statsRow(label string, s Stats) []string {
	return []string{label, fmt.Sprint(s.N), ms(s.P50), ms(s.P90), ms(s.P99), ms(s.Max)}
}

// statsColumns are the headers matching statsRow.
var statsColumns = []string{"measurement", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"}
