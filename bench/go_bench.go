package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

func init() { register("go-bench", goBenchSuite) }

// goBenchmark is one Go benchmark of the request hot path.
type goBenchmark struct {
	pkg, name, what string
	// zeroAlloc marks issue 10's goal: no allocation per request.
	zeroAlloc bool
}

var goBenchmarks = []goBenchmark{
	{"./internal/router", "BenchmarkRouteMatch", "route parse: echo's route match, id validation and upstream path, /threads/{t}/v1/... and /sandboxes/{id}/v1/...", true},
	{"./internal/pool", "BenchmarkAcquireCached", "cache lookup: cached acquire and in-flight mark, with tracing off and with an unsampled trace", true},
	{"./internal/pool", "BenchmarkPreviewVerify", "preview link check on a cached route: parse, expiry, revocation, key, route look-up, HMAC-SHA256", true},
	{"./internal/pool", "BenchmarkRouteByIDCached", "cache lookup by sandbox id: ownership check and in-flight mark", true},
	{"./internal/pool", "BenchmarkTouchFlush1000Routes", "touch coalescing: one flush of 1,000 touched routes (one pipelined Redis call, real redis-server)", false},
	{"./internal/proxy", "BenchmarkRewrite", "header rewrite: upstream URL, stripped credentials, X-Forwarded-*", false},
	{"./internal/router", "BenchmarkAccount", "access accounting, no access log", false},
	{"./internal/telemetry", "BenchmarkRecordRequest", "request metrics", false},
	{"./internal/egress", "BenchmarkDownload1MiB", "egress proxy: a 1 MiB download from loopback direct, forwarded (http://) and through a CONNECT tunnel; MB/s = 1.048576e9 / ns/op", false},
}

// benchLine is one result line of `go test -bench -benchmem`, with MB/s when
// the benchmark sets bytes; the name loses its -GOMAXPROCS suffix.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+[\d.]+ MB/s)?\s+(\d+) B/op\s+(\d+) allocs/op`)

// benchRuns are the -count runs of one benchmark (a sub-benchmark is its own).
type benchRuns struct {
	ns, bytes, allocs []float64
}

// parseBenchOutput groups result lines by benchmark, in output order.
func parseBenchOutput(out string) ([]string, map[string]*benchRuns) {
	var order []string
	by := map[string]*benchRuns{}
	for _, line := range strings.Split(out, "\n") {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		r := by[m[1]]
		if r == nil {
			r = &benchRuns{}
			by[m[1]] = r
			order = append(order, m[1])
		}
		ns, _ := strconv.ParseFloat(m[2], 64)
		b, _ := strconv.ParseFloat(m[3], 64)
		a, _ := strconv.ParseFloat(m[4], 64)
		r.ns, r.bytes, r.allocs = append(r.ns, ns), append(r.bytes, b), append(r.allocs, a)
	}
	return order, by
}

func medianF(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// goBenchSuite runs the hot-path benchmarks, package by package (a package
// that does not build costs its own rows, not the suite), and tabulates
// medians.
func goBenchSuite(ctx context.Context) (Result, error) {
	began := time.Now()
	root, err := moduleRoot(ctx)
	if err != nil {
		return Result{}, err
	}
	var pkgs []string
	for _, b := range goBenchmarks {
		if !slices.Contains(pkgs, b.pkg) {
			pkgs = append(pkgs, b.pkg)
		}
	}
	res := Result{Title: "Go benchmarks: the request hot path",
		Columns: []string{"benchmark", "measures", "median ns/op", "median B/op", "median allocs/op", "zero-allocation goal"},
		Figures: map[string]float64{}}
	var failed []string
	for _, pkg := range pkgs {
		var names []string
		for _, b := range goBenchmarks {
			if b.pkg == pkg {
				names = append(names, b.name)
			}
		}
		args := []string{"test", "-run", "^$", "-bench", "^(" + strings.Join(names, "|") + ")$", "-benchmem",
			"-count", strconv.Itoa(opts.GoBenchCount), "-benchtime", opts.GoBenchTime, pkg}
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		order, by := parseBenchOutput(string(out))
		if err != nil {
			first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
			failed = append(failed, fmt.Sprintf("`go %s` failed (%v): %s", strings.Join(args, " "), err, first))
		}
		for _, b := range goBenchmarks {
			if b.pkg != pkg {
				continue
			}
			found := false
			for _, name := range order {
				if name != b.name && !strings.HasPrefix(name, b.name+"/") {
					continue
				}
				found = true
				res.Rows = append(res.Rows, benchRow(res.Figures, name, b, by[name]))
			}
			if !found {
				res.Rows = append(res.Rows, []string{"`" + b.name + "` (" + pkg + ")", b.what, "—", "—", "—", "not measured: no result"})
			}
		}
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("`go test -run '^$' -bench '^(NAMES)$' -benchmem -count %d -benchtime %s PKG`, one package at a time; each column is "+
			"the median of the %d runs. The zero-allocation goal (issue 10: route parse and cache lookup) counts the most "+
			"allocations per op in any run, so one allocating run misses it.", opts.GoBenchCount, opts.GoBenchTime, opts.GoBenchCount),
		"`BenchmarkAcquireCached` and `BenchmarkRouteByIDCached` run in parallel on every core (b.RunParallel), so their ns/op is wall time per lookup with all cores busy; "+
			"the rest run on one goroutine. The touch flush is per flush of 1,000 routes, not per request: per request, touch "+
			"coalescing costs the atomic store inside the cached acquire.",
		fmt.Sprintf("The suite took %s.", time.Since(began).Round(time.Second)))
	res.Notes = append(res.Notes, failed...)
	return res, nil
}

// benchRow tabulates one benchmark's runs and records its figures.
func benchRow(figs map[string]float64, name string, b goBenchmark, r *benchRuns) []string {
	ns, bytes, allocs := medianF(r.ns), medianF(r.bytes), medianF(r.allocs)
	worst := slices.Max(r.allocs)
	figs[benchKey(name, "ns_op")], figs[benchKey(name, "bytes_op")] = ns, bytes
	figs[benchKey(name, "allocs_op")], figs[benchKey(name, "allocs_max")] = allocs, worst
	goal := "—"
	if b.zeroAlloc {
		goal = fmt.Sprintf("met (0 in all %d runs)", len(r.allocs))
		if worst > 0 {
			goal = fmt.Sprintf("MISSED (up to %.0f allocs/op)", worst)
		}
	}
	return []string{"`" + name + "` (" + b.pkg + ")", b.what, strconv.FormatFloat(ns, 'f', 1, 64),
		strconv.FormatFloat(bytes, 'f', 0, 64), strconv.FormatFloat(allocs, 'f', 0, 64), goal}
}
