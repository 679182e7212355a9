package main

import (
	"context"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/remote"
)

// proxyFigures is a proxy-throughput result with small-GET figures.
func proxyFigures(gwRPS, ngxRPS, gwP99, directP99 float64) Result {
	f := map[string]float64{}
	for _, c := range proxyConns {
		for _, t := range []string{"direct", "nginx", "gateway"} {
			f[proxyKey(c, t, "rps")] = 1000 * float64(c)
			f[proxyKey(c, t, "p50_ms")] = 0.5 * float64(c)
			f[proxyKey(c, t, "p99_ms")] = float64(c)
		}
	}
	f[proxyKey(goalConns, "gateway", "rps")], f[proxyKey(goalConns, "nginx", "rps")] = gwRPS, ngxRPS
	f[proxyKey(goalConns, "gateway", "p99_ms")], f[proxyKey(goalConns, "direct", "p99_ms")] = gwP99, directP99
	f[proxyKey(goalConns, "gateway", "cpu_us")], f[proxyKey(goalConns, "nginx", "cpu_us")] = 90, 50
	f[ratioKey("post_4k", goalConns)], f[ratioKey("download_1m", goalConns)], f[ratioKey("sse_exec", goalConns)] = 0.95, 0.8, 0.95
	return Result{Name: "proxy-throughput", Figures: f, Machine: Machine{Date: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), Load: "1.00 2.00 3.00"}}
}

// withFloor adds the floor proxy's CPU per request (µs) at the goal's connections.
func withFloor(r Result, us float64) Result {
	r.Figures[proxyKey(goalConns, floorTarget, "cpu_us")] = us
	return r
}

// withSandgateFloor adds the floor on the gateway's own server.
func withSandgateFloor(r Result, us float64) Result {
	r.Figures[proxyKey(goalConns, sandgateFloorTarget, "cpu_us")] = us
	return r
}

// pinnedCPU adds the pinned measurement: the gateway's, nginx's and the
// floor on the gateway's server's CPU per request (µs).
func pinnedCPU(r Result, gw, ngx, sgFloor float64) Result {
	r.Figures[proxyKey(goalConns, "gateway", "cpu_us_pinned")] = gw
	r.Figures[proxyKey(goalConns, "nginx", "cpu_us_pinned")] = ngx
	r.Figures[proxyKey(goalConns, sandgateFloorTarget, "cpu_us_pinned")] = sgFloor
	return r
}

// withEcho adds the paired rounds' median ratios of the gateway to the echo
// floor and of the echo floor to the floor on the gateway's server.
func withEcho(r Result, gateway, echo float64) Result {
	r.Figures[echoFloorFigure(goalConns, "cpu_us")] = gateway
	r.Figures[pairedFigure(goalConns, echoFloorTarget, "cpu_us")] = echo
	return r
}

// withPaired adds the paired rounds' median ratios to the floor on the
// gateway's server, of kind cpu_us or cpu_us_pinned.
func withPaired(r Result, kind string, gateway, control float64) Result {
	r.Figures[pairedFigure(goalConns, "gateway", kind)] = gateway
	r.Figures[pairedFigure(goalConns, controlTarget, kind)] = control
	r.Figures[proxyKey(goalConns, "paired", kind+"_rounds")] = 16
	r.Figures[proxyKey(goalConns, "paired", kind+"_incarnations")] = 4
	return r
}

// scaleFigures is a scale result with the given 3-node command spread and
// modelled 3-node/1-node ratio.
func scaleFigures(spread, ratio float64) Result {
	return Result{Name: "scale", Figures: map[string]float64{figScaleBalanceCmds: spread, figScaleBalanceCPU: spread,
		figScaleRecords: 1e6, figScaleRatio: ratio, figScaleTput1: 10000, figScaleTput3: 10000 * ratio, figScaleCPURatio: ratio,
		figScaleWall1: 3000, figScaleWall3: 3100}}
}

func TestGoalVerdicts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		results []Result
		row     int // index in goalRows
		verdict string
	}{
		{"req/s missed", []Result{proxyFigures(6600, 10000, 10, 9)}, 0, "missed by 34%"},
		{"req/s met", []Result{proxyFigures(10500, 10000, 10, 9)}, 0, "met"},
		{"p99 missed", []Result{proxyFigures(1, 1, 14.97, 9.45)}, 1, "missed by 4.52 ms"},
		{"p99 met", []Result{proxyFigures(1, 1, 9.9, 9.45)}, 1, "met"},
		{"p99 below direct", []Result{proxyFigures(1, 1, 9, 9.45)}, 1, "met (below the reference: noise)"},
		{"route parse allocates", []Result{{Name: "go-bench", Figures: map[string]float64{benchKey(benchRouteParse, "allocs_max"): 2,
			benchKey(benchRouteParse, "bytes_op"): 32, benchKey(benchRouteParse, "ns_op"): 9}}}, 2, "missed by 2 allocations"},
		{"cache lookup zero", []Result{{Name: "go-bench", Figures: map[string]float64{benchKey(benchCacheHit, "allocs_max"): 0,
			benchKey(benchCacheHit, "bytes_op"): 0, benchKey(benchCacheHit, "ns_op"): 300}}}, 3, "met"},
		{"warm reclaim missed", []Result{{Name: "lifecycle", Figures: map[string]float64{figWarmPoolP99: 6.5, figWarmHTTPP99: 8}}}, 4, "missed by 1.50 ms"},
		{"process create met", []Result{{Name: "process-cold-create", Figures: map[string]float64{figCreateIsolatedP50: 19, figCreateNoneP50: 60, figGoStartP50: 17}}}, 5, "met"},
		{"process create judged isolated", []Result{{Name: "process-cold-create", Figures: map[string]float64{figCreateIsolatedP50: 28.13, figCreateNoneP50: 19.75, figGoStartP50: 17}}}, 5, "missed by 8.13 ms"},
		{"process create before isolation", []Result{{Name: "process-cold-create", Figures: map[string]float64{figCreateP50: 29, figGoStartP50: 27}}}, 5, "not measured"},
		{"docker within 100 ms", []Result{{Name: "docker-cold-create", Figures: map[string]float64{figCreateP50: 1200, figDockerRefP50: 1150}}}, 6, "met"},
		{"docker too slow", []Result{{Name: "docker-cold-create", Figures: map[string]float64{figCreateP50: 1400, figDockerRefP50: 1150}}}, 6, "missed by 150 ms"},
		{"suite missing", nil, 6, "not measured"},
		{"suite without figures", []Result{{Name: "lifecycle"}}, 4, "not measured"},
		{"prewarmed first request met", []Result{prewarmFigures(3.2, 7, 4.1, 9.9)}, 7, "met"},
		{"prewarmed first request missed", []Result{prewarmFigures(6.25, 9, 4, 9)}, 7, "missed: kept-alive p50 by 1.25 ms"},
		{"prewarmed first request, new connection's tail", []Result{prewarmFigures(3.2, 7, 4.1, 12.5)}, 7, "missed: new connection p99 by 2.50 ms"},
		{"prewarmed first request before the new-connection row", []Result{{Name: "lifecycle", Figures: map[string]float64{figFirstPrewarmP50: 3.2, figFirstPrewarmP99: 7, figFirstColdP50: 45}}}, 7, "not measured"},
		{"prewarm row before its figures", []Result{{Name: "lifecycle", Figures: map[string]float64{figWarmPoolP99: 1, figWarmHTTPP99: 2}}}, 7, "not measured"},
		{"cpu per request missed", []Result{proxyFigures(1, 1, 1, 1)}, 8, "missed by 40.0 µs (1.80× nginx's)"},
		{"cpu per request at the floor", []Result{withFloor(proxyFigures(1, 1, 1, 1), 85)}, 8, "met at the floor (+6 % of it; nginx's 1.80× below)"},
		{"cpu per request above the floor", []Result{withFloor(proxyFigures(1, 1, 1, 1), 70)}, 8, "missed by 20.0 µs over the floor (1.80× nginx's)"},
		{"cpu per request below the floor", []Result{withFloor(proxyFigures(1, 1, 1, 1), 180)}, 8, "missed by 40.0 µs (1.80× nginx's); 90.0 µs below the floor"},
		{"cpu per request at the floor on the gateway's server", []Result{withSandgateFloor(withFloor(proxyFigures(1, 1, 1, 1), 180), 84)}, 8,
			"met at the floor of ReverseProxy on the gateway's server (+7 % of it; nginx's 1.80× below)"},
		{"cpu per request over the floor on the gateway's server", []Result{withSandgateFloor(withFloor(proxyFigures(1, 1, 1, 1), 180), 80)}, 8,
			"missed by 40.0 µs (1.80× nginx's); 90.0 µs below the floor; 10.0 µs over the floor on the gateway's server (+12 %)"},
		{"cpu per request at the floor, pinned too", []Result{pinnedCPU(withSandgateFloor(withFloor(proxyFigures(1, 1, 1, 1), 180), 84), 70, 40, 66)}, 8,
			"met at the floor of ReverseProxy on the gateway's server (+7 % of it; nginx's 1.80× below); pinned: met at the floor of ReverseProxy on the gateway's server (+6 % of it; nginx's 1.75× below)"},
		{"cpu per request at the floor, but not pinned", []Result{pinnedCPU(withSandgateFloor(withFloor(proxyFigures(1, 1, 1, 1), 180), 84), 70, 40, 60)}, 8,
			"missed with the proxy pinned: missed by 30.0 µs (1.75× nginx's); 10.0 µs over the floor on the gateway's server (+17 %) (unpinned: met at the floor of ReverseProxy on the gateway's server (+7 % of it; nginx's 1.80× below))"},
		{"cpu per request over the floor, pinned at it", []Result{pinnedCPU(withSandgateFloor(withFloor(proxyFigures(1, 1, 1, 1), 180), 80), 70, 40, 66)}, 8,
			"missed by 40.0 µs (1.80× nginx's); 90.0 µs below the floor; 10.0 µs over the floor on the gateway's server (+12 %); pinned: met at the floor of ReverseProxy on the gateway's server (+6 % of it; nginx's 1.75× below)"},
		{"cpu per request over the floor in its cell, at it in paired rounds", []Result{withPaired(withSandgateFloor(withFloor(proxyFigures(1, 1, 1, 1), 180), 80), "cpu_us", 1.04, 0.99)}, 8,
			"met at the floor of ReverseProxy on the gateway's server (+4 % of it in paired rounds; nginx's 1.80× below)"},
		{"cpu per request at the floor in its cell, over it in paired rounds", []Result{withPaired(withSandgateFloor(withFloor(proxyFigures(1, 1, 1, 1), 180), 84), "cpu_us", 1.15, 1.01)}, 8,
			"missed by 40.0 µs (1.80× nginx's); 90.0 µs below the floor; +15 % of the floor on the gateway's server in paired rounds"},
		{"cpu per request over the echo floor too", []Result{withEcho(withPaired(withSandgateFloor(withFloor(proxyFigures(1, 1, 1, 1), 180), 84), "cpu_us", 1.15, 1.01), 1.13, 1.02)}, 8,
			"missed by 40.0 µs (1.80× nginx's); 90.0 µs below the floor; +15 % of the floor on the gateway's server in paired rounds"},
		{"cpu per request at the floor in paired rounds, pinned over it", []Result{withPaired(withPaired(pinnedCPU(withSandgateFloor(withFloor(proxyFigures(1, 1, 1, 1), 180), 80), 70, 40, 66), "cpu_us", 1.02, 1), "cpu_us_pinned", 1.11, 1)}, 8,
			"missed with the proxy pinned: missed by 30.0 µs (1.75× nginx's); +11 % of the floor on the gateway's server in paired rounds (unpinned: met at the floor of ReverseProxy on the gateway's server (+2 % of it in paired rounds; nginx's 1.80× below))"},
		{"post met", []Result{proxyFigures(1, 1, 1, 1)}, 9, "met"},
		{"download missed", []Result{proxyFigures(1, 1, 1, 1)}, 10, "missed by 10%"},
		{"sse below nginx", []Result{proxyFigures(1, 1, 1, 1)}, 11, "below nginx by 5%"},
		{"memory per thread met", []Result{{Name: "threads-10k", Figures: map[string]float64{figRSSPerThread: 9600}}}, 12, "met"},
		{"memory per thread missed", []Result{{Name: "threads-10k", Figures: map[string]float64{figRSSPerThread: 31074}}}, 12, "missed by 15.1 KB"},
		{"scale balance met", []Result{scaleFigures(1.2, 2.8)}, 13, "met"},
		{"scale one slot", []Result{scaleFigures(1e9, 1.0)}, 13, "missed (∞ (a node did nothing))"},
		{"scale throughput met", []Result{scaleFigures(1.2, 2.8)}, 14, "met"},
		{"scale throughput missed", []Result{scaleFigures(1e9, 1.0)}, 14, "missed by 1.50×"},
		{"scale not run", nil, 14, "not measured"},
		{"thaw met", []Result{{Name: "freeze", Figures: map[string]float64{figThawProcessP50: 4, figThawProcessP99: 9.5}}}, 15, "met"},
		{"thaw missed", []Result{{Name: "freeze", Figures: map[string]float64{figThawProcessP50: 4, figThawProcessP99: 12.25}}}, 15, "missed by 2.25 ms"},
		{"thaw not run", nil, 15, "not measured"},
		{"checkpoint met", []Result{{Name: "checkpoint", Figures: map[string]float64{figCheckpointReflinkP50: 44, figCheckpointCopyP50: 350}}}, 16, "met"},
		{"checkpoint missed", []Result{{Name: "checkpoint", Figures: map[string]float64{figCheckpointReflinkP50: 250}}}, 16, "missed by 50.00 ms"},
		{"checkpoint without copy-on-write", []Result{{Name: "checkpoint", Figures: map[string]float64{figCheckpointCopyP50: 350}}}, 16, "not measured"},
		{"resume met", []Result{{Name: "resume", Figures: map[string]float64{figResumeKilledP50: 4, figResumeKilledP99: 9}}}, 17, "met"},
		{"resume missed", []Result{{Name: "resume", Figures: map[string]float64{figResumeKilledP50: 40, figResumeKilledP99: 120}}}, 17, "missed by 20.00 ms"},
		{"template claims met", []Result{{Name: "templates", Figures: map[string]float64{figTplClaimPct: 97.5}}}, 18, "met"},
		{"template claims missed", []Result{{Name: "templates", Figures: map[string]float64{figTplClaimPct: 82.5}}}, 18, "missed by 12.5 points"},
		{"template claims not run", nil, 18, "not measured"},
		{"template first request met", []Result{{Name: "templates", Figures: map[string]float64{figTplFirstP50: 4.4, figTplFirstP99: 12, figTplColdImageP50: 24}}}, 19, "met"},
		{"template first request missed", []Result{{Name: "templates", Figures: map[string]float64{figTplFirstP50: 14.5, figTplFirstP99: 40, figTplColdImageP50: 24}}}, 19, "missed by 4.50 ms"},
		{"template first request before its figures", []Result{{Name: "templates", Figures: map[string]float64{figTplClaimPct: 100}}}, 19, "not measured"},
		{"density met", []Result{{Name: "density", Figures: map[string]float64{figDensityLive: 5000, figDensityKeepP99: 12, figDensityFreshP99: 30, figDensityPSS: 1 << 20}}}, 20, "met"},
		{"density stopped short", []Result{{Name: "density", Figures: map[string]float64{figDensityLive: 3250, figDensityKeepP99: 12, figDensityFreshP99: 30, figDensityPSS: 1 << 20}}}, 20, "missed: 3250 of 5000"},
		{"density too slow", []Result{{Name: "density", Figures: map[string]float64{figDensityLive: 5000, figDensityKeepP99: 12, figDensityFreshP99: 62.5, figDensityPSS: 1 << 20}}}, 20, "missed by 12.50 ms"},
		{"density not run", nil, 20, "not measured"},
		{"sampler met", []Result{{Name: "sampler", Figures: map[string]float64{figSampler1000Pct: 0.4}}}, 21, "met"},
		{"sampler missed", []Result{{Name: "sampler", Figures: map[string]float64{figSampler1000Pct: 3.25}}}, 21, "missed by 2.25 points"},
		{"sampler not run", nil, 21, "not measured"},
	} {
		rs := map[string]Result{}
		for _, r := range tc.results {
			rs[r.Name] = r
		}
		rows := goalRows(rs)
		if len(rows) != 22 {
			t.Fatalf("%d goal rows, want 22", len(rows))
		}
		if got := rows[tc.row][2]; got != tc.verdict {
			t.Errorf("%s: verdict %q, want %q (row %v)", tc.name, got, tc.verdict, rows[tc.row])
		}
		if tc.name == "process create judged isolated" && (rows[tc.row][1] != "isolated p50 28.13 ms (none: 19.75 ms)" ||
			!strings.Contains(rows[tc.row][3], "isolation adds 8.38 ms over none")) {
			t.Errorf("%s: row %q does not give the none figure beside the isolated one", tc.name, rows[tc.row])
		}
		if tc.name == "cpu per request over the echo floor too" && (!strings.Contains(rows[tc.row][1],
			"gateway ÷ echo floor 1.130 (echo floor ÷ floor on the gateway's server 1.020: echo's share)") ||
			!strings.Contains(rows[tc.row][3], "-server sandgate-echo")) {
			t.Errorf("%s: row %q does not give the echo floor", tc.name, rows[tc.row])
		}
		if len(rows[tc.row]) != len(goalColumns) {
			t.Errorf("%s: %d cells, want %d", tc.name, len(rows[tc.row]), len(goalColumns))
		}
	}
}

func TestDrawLatencyChart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), chartFile)
	if err := drawLatencyChart(proxyFigures(6600, 10000, 15, 9), path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 13*96 || b.Dy() != 5*96 {
		t.Fatalf("chart is %v, want 1248x480", b)
	}
	if err := drawLatencyChart(Result{Name: "proxy-throughput"}, path); err == nil {
		t.Fatal("a chart without figures drew nothing and said nothing")
	}
}

func TestParseBenchOutput(t *testing.T) {
	t.Parallel()
	out := `goos: linux
pkg: github.com/sandgate/sandgate/internal/pool
BenchmarkAcquireCached/tracing=off-2         	 3148722	       378.5 ns/op	       0 B/op	       0 allocs/op
BenchmarkAcquireCached/tracing=off-2         	 3148722	       390.5 ns/op	       0 B/op	       1 allocs/op
BenchmarkAcquireCached/tracing=off-2         	 3148722	       380.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkTouchFlush1000Routes-2   	     100	  1200000 ns/op	  345678 B/op	    2010 allocs/op
BenchmarkDownload1MiB/forward-2   	    1000	  1048576 ns/op	1000.00 MB/s	   40000 B/op	      90 allocs/op
PASS`
	order, by := parseBenchOutput(out)
	if len(order) != 3 || order[0] != "BenchmarkAcquireCached/tracing=off" || order[1] != "BenchmarkTouchFlush1000Routes" ||
		order[2] != "BenchmarkDownload1MiB/forward" || by[order[2]].ns[0] != 1048576 {
		t.Fatalf("order %v", order)
	}
	figs := map[string]float64{}
	row := benchRow(figs, order[0], goBenchmark{pkg: "./internal/pool", name: "BenchmarkAcquireCached", zeroAlloc: true}, by[order[0]])
	if row[2] != "380.0" || row[4] != "0" || !strings.HasPrefix(row[5], "MISSED") {
		t.Fatalf("row %v: want median 380.0 ns, median 0 allocs, goal missed (one run allocated)", row)
	}
	if figs[benchKey(order[0], "allocs_max")] != 1 || figs[benchKey(order[0], "ns_op")] != 380 {
		t.Fatalf("figures %v", figs)
	}
}

func TestSumInitTrace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		trace string
		sum   time.Duration
		n     int
	}{
		{"none", "usage: gateway sandbox\n", 0, 0},
		{"two packages and noise", "init runtime @1.3 ms, 0.48 ms clock, 0 bytes, 0 allocs\nusage: x\n" +
			"init github.com/distribution/reference @9.1 ms, 2.8 ms clock, 414552 bytes, 3600 allocs\n", 3280 * time.Microsecond, 2},
		{"malformed clock", "init runtime @1.3 ms, x ms clock, 0 bytes, 0 allocs\n", 0, 0},
	} {
		if sum, n := sumInitTrace(tc.trace); sum != tc.sum || n != tc.n {
			t.Errorf("%s: sumInitTrace = %v, %d; want %v, %d", tc.name, sum, n, tc.sum, tc.n)
		}
	}
}

func TestProcStat(t *testing.T) {
	t.Parallel()
	st, err := parseProcStat("4242 (a (weird) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 250 30 0 0 20 0 1 0 5 1000 10")
	if err != nil || st.pgrp != 4240 || st.cpu != 280*clockTick {
		t.Fatalf("parse: %+v %v, want pgrp 4240 and 2.8s", st, err)
	}
	if _, err := parseProcStat("4242 no name"); err == nil {
		t.Fatal("a line without a command name parsed")
	}
	if rss, err := vmRSS(os.Getpid()); err != nil || rss <= 0 {
		t.Fatalf("own VmRSS: %d %v", rss, err)
	}
	if n, err := openFDs(os.Getpid()); err != nil || n < 3 {
		t.Fatalf("own fds: %d %v", n, err)
	}
	if _, err := processCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}

func TestPromValues(t *testing.T) {
	t.Parallel()
	text := "# HELP go_goroutines x\n# TYPE go_goroutines gauge\ngo_goroutines 12\ngo_memstats_heap_inuse_bytes 4.194304e+06\n" +
		"sandgate_sandboxes{state=\"active\"} 3\n"
	got := promValues(text, "go_goroutines", "go_memstats_heap_inuse_bytes", "sandgate_sandboxes")
	if got["go_goroutines"] != 12 || got["go_memstats_heap_inuse_bytes"] != 4194304 || len(got) != 2 {
		t.Fatalf("%v", got)
	}
}

// The stand-in provisioner speaks the protocol of the real remote backend.
func TestStandinProvisionerServesTheRemoteBackend(t *testing.T) {
	t.Parallel()
	sandbox := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandbox" {
			http.NotFound(w, r)
			return
		}
		writeJSONBody(w, http.StatusOK, map[string]any{"success": true})
	}))
	defer sandbox.Close()
	prov, err := startStandinProvisioner(sandbox.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer prov.close()
	be, err := remote.New(remote.Config{URL: prov.url}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spec := backend.Spec{SandboxID: "0123456789abcdef", User: "default", Thread: "t-1"}
	for range 2 { // create is idempotent
		info, err := be.Create(ctx, spec)
		if err != nil || info.URL != sandbox.URL || info.Thread != "t-1" {
			t.Fatalf("create: %+v %v", info, err)
		}
	}
	if n := prov.creates.Load(); n != 1 {
		t.Fatalf("%d creates counted for one sandbox id", n)
	}
	if info, found, err := be.Discover(ctx, spec.SandboxID); err != nil || !found || info.URL != sandbox.URL {
		t.Fatalf("discover: %+v %v %v", info, found, err)
	}
	if all, err := be.List(ctx); err != nil || len(all) != 1 || all[0].SandboxID != spec.SandboxID {
		t.Fatalf("list: %+v %v", all, err)
	}
	if err := be.Destroy(ctx, backend.Info{SandboxID: spec.SandboxID}); err != nil {
		t.Fatal(err)
	}
	if _, found, err := be.Discover(ctx, spec.SandboxID); err != nil || found {
		t.Fatalf("discover after destroy: %v %v", found, err)
	}
}

func TestAxisTicks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		marker plot.Ticker
		lo, hi float64
		want   string
	}{
		{roundTicks{}, 0, 27964, "0 5000 10000 15000 20000 25000"},
		{roundTicks{}, 0, 900, "0 200 400 600 800"},
		{roundTicks{}, 0, 12, "0 2 4 6 8 10 12"},
		{roundTicks{}, 5, 5, "5"},
		{logTicks{}, 0.18, 61, "0.2 0.5 1 2 5 10 20 50"},
		{logTicks{}, 1, 10, "1 2 5 10"},
		{logTicks{}, 0, 10, ""},
	} {
		var got []string
		for _, tk := range tc.marker.Ticks(tc.lo, tc.hi) {
			got = append(got, tk.Label)
		}
		if s := strings.Join(got, " "); s != tc.want {
			t.Errorf("%T.Ticks(%v, %v) = %q, want %q", tc.marker, tc.lo, tc.hi, s, tc.want)
		}
	}
}

func TestSuiteOrderNamesEverySuite(t *testing.T) {
	t.Parallel()
	if got := suiteNames(); !slices.Equal(got, suiteOrder) {
		t.Fatalf("suites in run order %v, want suiteOrder %v: a suite is registered but not ordered, or ordered but gone", got, suiteOrder)
	}
}

// TestDocFromFixture regenerates the doc from the result files in
// testdata: the Goals table is computed from their figures, the chart is
// drawn, and the sections follow the run order.
func TestDocFromFixture(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	doc := filepath.Join(dir, "BENCHMARKS.md")
	head := docHeader{Command: "go run ./bench", Took: 14 * time.Minute, Machine: Machine{CPU: "Fixture CPU", Cores: 2,
		OS: "linux/amd64", GoVersion: "go1.26.8", Date: time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC), Load: "0.1 0.2 0.3"},
		Memory: "8.0 GiB", Kernel: "Linux 6.1", Versions: []string{"go1.26.8", "nginx version: nginx/1.22.1"}}
	if err := writeDoc(filepath.Join("testdata", "results"), doc, head); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	// Every goal, as computed from the fixture's figures: by how much it is met or missed.
	for _, want := range []string{
		"| gateway req/s ≥ nginx's, small GET, 64 connections | gateway 9000, nginx 12000 req/s (0.75×) | missed by 25% | " +
			"against direct to the sandbox: nginx 0.60×, gateway 0.45×.",
		": gateway 67.0 µs, nginx 50.0 µs; Sandgate's own hot path (",
		"is 0.79 µs of the gateway's",
		"| p99 added over direct < 1 ms, cached thread (small GET, 64 connections) | 1.50 ms added (gateway p99 10.50, direct 9.00) | missed by 0.50 ms | " +
			"at 1 connection, where nothing queues, the gateway adds 0.25 ms (met)",
		"| zero allocations per request: route parse | 0 allocs/op (most in any run), 0 B/op, 85.5 ns/op (`BenchmarkRouteMatch/thread`) | met |",
		"| zero allocations per request: cache lookup (cached acquire) | 0 allocs/op (most in any run), 0 B/op, 41.2 ns/op (`BenchmarkAcquireCached/tracing=off`) | met |",
		"| warm reclaim < 5 ms p99 | pool API p99 2.50 ms; over HTTP p99 3.90 ms | met |",
		"| process cold create < 20 ms p50 with isolation | isolated p50 31.20 ms (none: 27.50 ms) | missed by 11.20 ms | evaluated with isolation (the default); " +
			"isolation adds 3.70 ms over none (27.50 ms p50, same run). Starting and exiting the sandbox binary (sandgate-sandbox) alone takes 24.00 ms p50 here, " +
			"of which 15.00 ms is its package init (an empty Go program: 3.00 ms) |",
		"| docker cold create within 100 ms of `docker run` + ready | Create p50 1280 ms, `docker run` + ready p50 1150 ms (+130 ms) | missed by 30 ms |",
		"| first request of a new thread < 5 ms p50, < 10 ms p99 (prewarm pool), kept-alive and new client connection | kept-alive p50 3.10 ms, p99 6.40 ms; new connection p50 3.60 ms, p99 7.20 ms (cold create: p50 41.50 ms) | met |",
		"Burst of 100 at once with --prewarm 20: 31 warm, p50 52.00 ms, p99 140.00 ms",
		"2026-01-02 03:04 UTC, load 0.50 0.40 0.30, quick run |",
		"- Regenerated by: `go run ./bench` (14m0s), 2026-01-02 04:00 UTC.",
		"- Machine: Fixture CPU, 2 cores, 8.0 GiB, Linux 6.1, linux/amd64; load average 0.1 0.2 0.3",
		"![p50 and p99 latency and req/s by connections, gateway vs nginx vs direct](bench-latency.png)",
		"| `BenchmarkRewrite/plain` (./internal/proxy) | header rewrite | 420.0 | 96 | 3 | — |",
		"| small GET /v1/sandbox | 64 | 20000 | 12000 | 9000 | 0.75 | 0.45 | 3.00 / 9.00 / 15.00 |",
		"| per-node Redis load within 1.5× across a 3-node Cluster | busiest ÷ idlest node: 1.12× commands processed, 1.30× CPU | met |",
		"| throughput on a 3-node Cluster ≥ 2.5× one node's | 2.75× (modelled: 10000 → 27500 pool ops/s) | met |",
		"| claim rate ≥ 95 %, new threads over 4 templates sharing one prewarm pool | 97.5 % claimed | met |",
		"| first request (create) of a new thread < 10 ms p50, mixed templates | p50 4.40 ms, p99 31.00 ms (cold create of the Python template: p50 23.75 ms) | met |",
		"| ≥ 5000 live isolated sandboxes, sweep p99 ≤ 50.00 ms through the gateway | 3000 live, p99 12.50 ms kept-alive / 20.25 ms new connection, 1.50 MiB PSS each | missed: 3000 of 5000 | **Stopped by: pids: fixture.** |",
		"![memory per sandbox and the sweep's p99 against live isolated sandboxes](bench-density.png)",
		"| metrics sampling of 1,000 sandboxes every second < 1 % of one core | 0.80 % (load 0.50 0.40 0.30) | met |",
		// A result's further tables follow its first.
		"(39 of 40 claimed a pre-started sandbox) | 40 | 4.40 | 7.80 | 31.00 | 31.00 |\n\nPre-started sandboxes per template during the mixed workload:\n\n" +
			"| t (s) | python pre-started (50 %) |\n| --- | --- |\n| 0.00 | 3 |\n| 2.00 | 5 |\n\n- Fixture.",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("doc lacks %q", want)
		}
	}
	if strings.Contains(s, "not measured") {
		t.Error("a goal is not measured although the fixture has every figure")
	}
	var at []int
	for _, title := range []string{"## Goals", "## Latency and throughput", "## Proxy throughput", "## Pool lifecycle",
		"## Process backend", "## Docker backend", "## Go benchmarks"} {
		at = append(at, strings.Index(s, title))
	}
	if slices.Contains(at, -1) || !slices.IsSorted(at) {
		t.Errorf("sections missing or out of run order (offsets %v):\n%s", at, s)
	}
	for _, chart := range []string{chartFile, densityChartFile} {
		f, err := os.Open(filepath.Join(dir, chart))
		if err != nil {
			t.Fatal(err)
		}
		_, err = png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("chart %s: %v", chart, err)
		}
	}
}

// prewarmFigures is a lifecycle result with the prewarmed first request's
// figures (kept-alive and new connection, p50 and p99) and a burst.
func prewarmFigures(keptP50, keptP99, newP50, newP99 float64) Result {
	return Result{Name: "lifecycle", Figures: map[string]float64{figFirstPrewarmP50: keptP50, figFirstPrewarmP99: keptP99,
		figFirstPrewarmNewP50: newP50, figFirstPrewarmNewP99: newP99, figFirstColdP50: 45,
		figBurstWarm: 31, figBurstP50: 52, figBurstP99: 140, figBurstRefillMS: 900}}
}
