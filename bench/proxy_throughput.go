package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

const (
	proxyThread = "bench"
	proxyUser   = "default" // the principal without authentication
	// proxyTimeout is wrk's per-request timeout: above the slowest cell's
	// tail (256 concurrent shell forks), so a slow answer is a latency,
	// not an error.
	proxyTimeout = 10 * time.Second
	// proxyMaxDrain bounds the pause after a run of a draining workload.
	proxyMaxDrain = 5 * time.Second
	bigFileSize   = 1 << 20
)

func init() { register("proxy-throughput", proxyThroughput) }

// target is one way to reach the sandbox; base + "/v1/..." is a request URL.
// cpu, when set, reads the CPU time the proxy process(es) have used so far.
type target struct {
	name, base string
	cpu        func() (time.Duration, error)
	pids       func() ([]int, error) // the proxy's processes; nil = none (direct)
}

// workload is one request shape, replayed by wrk with the same script
// against every target.
type workload struct {
	name    string
	key     string // in figure keys: ratioKey
	method  string
	path    string // from /v1
	body    string
	headers [][2]string
	conns   []int
	// oneRound measures in one run per target instead of opts.ProxyRounds
	// (whole seconds each, wrk's -d unit): a slow workload needs one long
	// run, or its first answers would not arrive within a round.
	oneRound bool
	// drain waits out the sandbox's work still in flight when a run ends
	// (an exec runs on after its client has gone), so that it does not
	// slow the next target's run.
	drain bool
	// check validates one response before anything is measured, so a
	// misrouted target cannot pass for a fast one.
	check func(resp *http.Response, body []byte) error
}

var proxyConns = []int{1, 16, 64, 256}

// execConns leaves out 256: 256 concurrent shell forks on 2 cores finish
// a few dozen requests in the whole run, a number about the fork storm.
var execConns = []int{1, 16, 64}

func proxyWorkloads() []workload {
	content := strings.Repeat("sandgate-bench-4k.", 4096/18+1)[:4096]
	writeBody, _ := json.Marshal(map[string]string{"file": "/mnt/user-data/workspace/bench.txt", "content": content})
	jsonCT := [2]string{"Content-Type", "application/json"}
	return []workload{
		{name: "small GET /v1/sandbox", key: "small_get", method: http.MethodGet, path: "/v1/sandbox", conns: proxyConns,
			check: wantSuccess},
		{name: "4 KB POST /v1/file/write", key: "post_4k", method: http.MethodPost, path: "/v1/file/write", body: string(writeBody),
			headers: [][2]string{jsonCT}, conns: proxyConns, check: wantSuccess},
		{name: "1 MiB GET /v1/file/download", key: "download_1m", method: http.MethodGet,
			path: "/v1/file/download?path=/mnt/user-data/workspace/big.bin", conns: proxyConns,
			check: func(resp *http.Response, body []byte) error {
				if resp.StatusCode != http.StatusOK || len(body) != bigFileSize {
					return fmt.Errorf("status %d, %d bytes, want 200 and %d", resp.StatusCode, len(body), bigFileSize)
				}
				return nil
			}},
		{name: "SSE POST /v1/shell/exec `echo x`", key: "sse_exec", method: http.MethodPost, path: "/v1/shell/exec",
			body: `{"command":"echo x"}`, headers: [][2]string{jsonCT, {"Accept", "text/event-stream"}}, conns: execConns, oneRound: true, drain: true,
			check: func(resp *http.Response, body []byte) error {
				ct := resp.Header.Get("Content-Type")
				if resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") ||
					!bytes.Contains(body, []byte("event: result")) || !bytes.Contains(body, []byte(`"exit_code":0`)) {
					return fmt.Errorf("status %d, Content-Type %q, body %.300q", resp.StatusCode, ct, body)
				}
				return nil
			}},
	}
}

func wantSuccess(resp *http.Response, body []byte) error {
	var env struct {
		Success bool `json:"success"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &env) != nil || !env.Success {
		return fmt.Errorf("status %d, body %.300q", resp.StatusCode, body)
	}
	return nil
}

// proxyThroughput compares the gateway with nginx and with no proxy at all,
// on the same sandbox, with the same wrk settings, interleaved per cell.
func proxyThroughput(ctx context.Context) (Result, error) {
	began, loadStart := time.Now(), loadAvg()
	tmp, err := os.MkdirTemp("", "sandgate-bench-proxy-")
	if err != nil {
		return Result{}, err
	}
	var cleanup cleanupStack
	defer func() { cleanup.run(); _ = os.RemoveAll(tmp) }()

	env, err := proxySetup(ctx, tmp, &cleanup)
	if err != nil {
		return Result{}, err
	}
	targets, secret := env.targets, env.secret
	workloads := proxyWorkloads()
	// The sandbox requires its secret: every client sends it, so the direct
	// and nginx targets pass it on; the gateway drops it and sends its own
	// copy, as it does for any client's.
	for i := range workloads {
		workloads[i].headers = append(workloads[i].headers, [2]string{sandboxspec.SecretHeader, secret})
	}
	// The floor is measured on the small GET only (its goal's workload).
	targetsOf := func(i int) []target {
		if i == 0 {
			return targets
		}
		return targets[:3]
	}
	for i, w := range workloads {
		for _, t := range targetsOf(i) {
			if err := sanityCheck(ctx, t, w); err != nil {
				return Result{}, fmt.Errorf("%s via %s: %w", w.name, t.name, err)
			}
		}
	}

	var rows [][]string
	figures := map[string]float64{}
	var smallGET string // workload 0's script
	for i, w := range workloads {
		script, err := writeScript(tmp, fmt.Sprintf("workload-%d", i), wrkScript(w.method, w.body, w.headers))
		if err != nil {
			return Result{}, err
		}
		if i == 0 {
			smallGET = script
		}
		for _, conns := range w.conns {
			cell, err := measureTargets(ctx, targetsOf(i), w, script, conns)
			if err != nil {
				return Result{}, err
			}
			fmt.Fprintf(os.Stderr, "bench: %s c=%d: direct %.0f, nginx %.0f, gateway %.0f req/s\n",
				w.name, conns, cell[0].RPS(), cell[1].RPS(), cell[2].RPS())
			rows = append(rows, proxyRow(w.name, conns, cell))
			figures[ratioKey(w.key, conns)] = cell[2].RPS() / max(cell[1].RPS(), 1)
			if i == 0 { // the small GET: the goals and the chart
				for ti, t := range targetsOf(i) {
					addCellFigures(figures, conns, t.name, cell[ti])
				}
			}
		}
	}

	cpu, err := measureCPU(ctx, env, workloads[0], smallGET, goalConns)
	if err != nil {
		return Result{}, err
	}
	for i, p := range cpu.pinnedProxies {
		fmt.Fprintf(os.Stderr, "bench: %s c=%d pinned: %s %.1f µs/req\n", workloads[0].name, goalConns, p.name,
			cpu.pinned[i].CPUPerRequestUS())
	}

	nginxBin, _ := lookNginx()
	versions := strings.Join([]string{toolVersion(ctx, nginxBin, "-v"), toolVersion(ctx, "wrk", "-v"),
		toolVersion(ctx, "redis-server", "--version")}, "; ")
	return Result{
		Title: "Proxy throughput: gateway vs nginx vs direct",
		Columns: []string{"workload", "conns", "direct req/s", "nginx req/s", "gateway req/s",
			"gateway ÷ nginx", "gateway ÷ direct", "direct p50 / p99 / p99.9 ms", "nginx p50 / p99 / p99.9 ms",
			"gateway p50 / p99 / p99.9 ms", "gateway p99 − direct ms", "nginx p99 − direct ms", "CPU µs/req n / g", "errors d / n / g"},
		Rows:    rows,
		Figures: figures,
		Tables: []Table{pinnedTable(cpu.pinnedProxies, cpu.pinned, goalConns, figures),
			pairedTable(cpu.unpinnedPairs, cpu.pinnedPairs, goalConns, figures)},
		Notes: []string{
			"The goals for a cached thread (gateway req/s ≥ nginx's and p99 added over direct < 1 ms, small GET at 64 connections) " +
				"are evaluated in the Goals table at the top of this file, from this suite's figures.",
			fmt.Sprintf("wrk -t1 (the machine's %d cores are shared by wrk, the proxy and the sandbox), --timeout %s, one Lua "+
				"script per workload, identical for the three targets, whose done() prints wrk's own summary as JSON (nothing is "+
				"scraped from wrk's text). Per cell: an unmeasured -d%s warm-up of each target, then %s of measuring per target, "+
				"back to back with the others: for the three fast workloads as %d rounds of 1 s in rotating order (direct nginx "+
				"gateway, nginx gateway direct, ...), req/s pooled over the rounds and each latency percentile the median of the "+
				"rounds'; the SSE exec as one %s run per target (its answers take longer than a round), each run followed by a "+
				"pause of its p99.9 latency (at most %s) so commands still running in the sandbox after wrk stops do not slow the "+
				"next target. So drift and bursts of "+
				"machine load hit all three targets alike: compare ratios within a row, not across runs.",
				runtime.NumCPU(), secs(proxyTimeout), secs(opts.ProxyWarmup), secs(opts.ProxyMeasure), opts.ProxyRounds, secs(opts.ProxyMeasure), secs(proxyMaxDrain)),
			"Same sandbox, same request paths: direct `http://S/v1/...`, nginx and gateway `http://P/threads/bench/v1/...`. " +
				"The gateway is `gateway --redis-url (a real redis-server) --max-sandboxes 0 --log-level warn` (process backend, " +
				"built with CGO_ENABLED=0) with the thread provisioned beforehand by `PUT /threads/bench/sandbox`, i.e. a cached " +
				"thread; the direct URL is the sandbox's own, found with the process backend's Discover. On the small GET two more " +
				"targets take their turns in the rotation, the floors, bench/floorproxy: httputil.ReverseProxy with nothing else " +
				"(no echo, router, authentication, accounting or tracing), built the same way, on Go's net/http server and " +
				"transport (256 kept-alive upstream connections), and with -server sandgate configured as the gateway's (pooled " +
				"128 KiB copy buffers, GOGC 400) on the gateway's own HTTP/1.1 server and sandbox transport; their req/s and CPU are in the figures and the Goals table, not in this table.",
			"nginx: 2 worker processes, upstream `keepalive 256`, `proxy_http_version 1.1`, `proxy_set_header Connection \"\"`, " +
				"`keepalive_requests 1000000` on both sides (Go's server has no per-connection request limit), no access log, " +
				"`proxy_buffering off` on the SSE location and, with `proxy_buffer_size 64k`, on the rest too: the gateway streams " +
				"responses as they come, and nginx's default buffering (8 × 4 KB buffers) measured 0.4-0.6× of this on the 1 MiB " +
				"download (the same on the small GET) in a side run on this machine.",
			"Workloads: the 4 KB POST writes a 4096-byte string to /mnt/user-data/workspace/bench.txt; big.bin (1 MiB, random) is " +
				"written through the API before the run; the SSE exec forks a shell per request (~15 ms on an idle machine), so the " +
				"sandbox bounds it, and it runs at 1, 16 and 64 connections only (at 256, 256 concurrent forks on 2 cores complete a few " +
				"dozen requests in the whole run); every response shape was checked once through each target before measuring.",
			"CPU µs/req is the proxy's user + system CPU time over its measured runs (from /proc/PID/stat, in 10 ms ticks) divided by " +
				"the requests it answered: the gateway process alone (its sandboxes are separate processes), nginx's master and workers together.",
			fmt.Sprintf("%s (the table after this one): the small GET at %d connections once more, every proxy (nginx, the gateway, "+
				"both floors) in the same rotation, warm-up and rounds as above, with every thread of the proxy measured pinned to CPU %d "+
				"and every thread of the sandbox and of wrk to CPU %d (sched_setaffinity; wrk is born pinned, forked from a pinned "+
				"thread), then all unpinned. Unpinned, the three processes share both cores as the scheduler likes, and a proxy's "+
				"request is often interrupted by the other two on its core; pinned, each proxy's CPU per request is its own work on "+
				"a core of its own.", pinnedTitle, goalConns, pinProxyCPU, pinLoadCPU),
			"Latencies are wrk's percentiles of its closed-loop requests (coordinated omission: under overload they understate " +
				"queueing). Errors are wrk's non-2xx count (responses with status ≥ 400) plus connect/read/write/timeout socket errors.",
			"Versions: " + versions + ".",
			fmt.Sprintf("Load average at start %s (at the end: see above); the suite took %s.", loadStart,
				time.Since(began).Round(time.Second)),
			pairedNote(),
			profileNote,
		},
	}, nil
}

// proxyEnv is what the suite measures through: the targets in measuring
// order, the sandbox's processes and secret, and pair, which starts a
// paired incarnation (proxy_paired.go).
type proxyEnv struct {
	targets []target
	sandbox func() ([]int, error)
	secret  string
	pair    func(ctx context.Context, k int) (pairTargets, error)
}

// proxySetup starts Redis, the gateway (which provisions the sandbox),
// nginx and the floors; everything started is on cleanup, which stops it
// in reverse order.
func proxySetup(ctx context.Context, tmp string, cleanup *cleanupStack) (proxyEnv, error) {
	bin, err := buildGateway(ctx)
	if err != nil {
		return proxyEnv{}, err
	}
	for _, d := range []string{"redis", "data", "nginx"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			return proxyEnv{}, err
		}
	}
	redis, redisAddr, err := startRedis(ctx, filepath.Join(tmp, "redis"))
	if err != nil {
		return proxyEnv{}, err
	}
	cleanup.push(func(context.Context) { redis.stop(syscall.SIGTERM, 5*time.Second) })

	dataDir := filepath.Join(tmp, "data")
	// The plain child (process_isolation: none) on a loopback port: wrk
	// needs a TCP address for the "direct" row, and the suite measures the
	// proxy, not the jail.
	gw, gwAddr, err := startGatewayEnv(ctx, bin, redisAddr, dataDir, filepath.Join(tmp, "gateway.log"), nil,
		"--process-isolation", "none")
	if err != nil {
		return proxyEnv{}, err
	}
	cleanup.push(func(context.Context) { gw.stop(syscall.SIGTERM, 10*time.Second) })

	// The sandbox outlives the gateway by design: destroy it while the
	// gateway, its parent, is still there to reap it.
	p, err := process.New(process.Config{StateDir: filepath.Join(dataDir, "sandboxes", "process"), Binary: process.SandboxBinary(bin),
		Isolation: process.IsolationNone},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return proxyEnv{}, err
	}
	sid := identity.SandboxID(proxyUser, proxyThread)
	cleanup.push(func(ctx context.Context) {
		if err := p.Destroy(ctx, backend.Info{SandboxID: sid}); err != nil {
			fmt.Fprintf(os.Stderr, "bench: destroy sandbox %s: %v\n", sid, err)
		}
	})
	if _, err := call(ctx, http.MethodPut, proxyBase(gwAddr)+"/sandbox", "", nil); err != nil {
		return proxyEnv{}, fmt.Errorf("provision thread: %w", err)
	}
	info, found, err := p.Discover(ctx, sid)
	if err != nil || !found {
		return proxyEnv{}, fmt.Errorf("discover sandbox %s: found=%v: %w", sid, found, err)
	}

	nginxAddr, err := freeAddr()
	if err != nil {
		return proxyEnv{}, err
	}
	ngx, err := startNginx(ctx, nginxConfig{Dir: filepath.Join(tmp, "nginx"), Listen: nginxAddr,
		Upstream: strings.TrimPrefix(info.URL, "http://"), Prefix: "/threads/" + proxyThread + "/", SSEPath: "v1/shell/exec"})
	if err != nil {
		return proxyEnv{}, err
	}
	cleanup.push(func(context.Context) { ngx.stop(syscall.SIGTERM, 5*time.Second) })

	floor, floorAddr, err := startFloorProxy(ctx, tmp, info.URL, "/threads/"+proxyThread, "net/http")
	if err != nil {
		return proxyEnv{}, err
	}
	cleanup.push(func(context.Context) { floor.stop(syscall.SIGTERM, 5*time.Second) })
	sgFloor, sgFloorAddr, err := startFloorProxy(ctx, tmp, info.URL, "/threads/"+proxyThread, "sandgate")
	if err != nil {
		return proxyEnv{}, err
	}
	cleanup.push(func(context.Context) { sgFloor.stop(syscall.SIGTERM, 5*time.Second) })

	if err := writeBigFile(ctx, info.URL, info.Secret); err != nil {
		return proxyEnv{}, err
	}
	targets := []target{
		{name: "direct", base: info.URL},
		{name: "nginx", base: proxyBase(nginxAddr), cpu: func() (time.Duration, error) { return groupCPU(ngx.pid()) },
			pids: func() ([]int, error) { return procsWhere(func(st procStat) bool { return st.pgrp == ngx.pid() }) }},
		serviceTarget("gateway", gwAddr, gw), serviceTarget(floorTarget, floorAddr, floor),
		serviceTarget(sandgateFloorTarget, sgFloorAddr, sgFloor),
	}
	// The sandbox is the gateway's child (it reaps it).
	sandbox := func() ([]int, error) {
		pids, err := procsWhere(func(st procStat) bool { return st.ppid == gw.pid() })
		if err == nil && len(pids) == 0 {
			err = errors.New("the gateway has no child: where is the sandbox?")
		}
		return pids, err
	}
	return proxyEnv{targets: targets, sandbox: sandbox, secret: info.Secret,
		pair: pairStarter(bin, redisAddr, dataDir, tmp, info.URL)}, nil
}

// floorTarget names the floor proxy's figures (bench/floorproxy), and
// sandgateFloorTarget its -server sandgate's.
const (
	floorTarget         = "floor"
	sandgateFloorTarget = "floor-sandgate"
)

// startFloorProxy builds and starts bench/floorproxy (httputil.ReverseProxy
// alone on server's HTTP server and transport, built as the gateway is:
// CGO_ENABLED=0, -trimpath) in front of the sandbox at upstream.
func startFloorProxy(ctx context.Context, tmp, upstream, prefix, server string) (*service, string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return nil, "", err
	}
	bin := filepath.Join(tmp, "floorproxy")
	if _, err := os.Stat(bin); err != nil { // one build for every floor
		build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./bench/floorproxy")
		build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return nil, "", fmt.Errorf("build floorproxy: %w\n%s", err, out)
		}
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	// Named by port too: the A/A control is a second -server sandgate.
	name := "floorproxy-" + strings.ReplaceAll(server, "/", "") + "-" + addr[strings.LastIndex(addr, ":")+1:]
	s, err := startServiceEnv(name, filepath.Join(tmp, name+".log"), nil, bin, "-listen", addr, "-upstream", upstream, "-prefix", prefix, "-server", server)
	if err != nil {
		return nil, "", err
	}
	if err := s.waitUp(ctx, 10*time.Second, dialCheck(addr)); err != nil {
		s.stop(syscall.SIGTERM, 5*time.Second)
		return nil, "", err
	}
	return s, addr, nil
}

// writeBigFile creates the download workload's file through the API.
func writeBigFile(ctx context.Context, sandboxURL, secret string) error {
	data := make([]byte, bigFileSize)
	_, _ = rand.Read(data)
	body, err := json.Marshal(map[string]string{"file": "/mnt/user-data/workspace/big.bin",
		"content": base64.StdEncoding.EncodeToString(data), "encoding": "base64"})
	if err != nil {
		return err
	}
	if _, err := call(ctx, http.MethodPost, sandboxURL+"/v1/file/write", string(body), [][2]string{{"Content-Type", "application/json"}, {sandboxspec.SecretHeader, secret}}); err != nil {
		return fmt.Errorf("write big.bin: %w", err)
	}
	return nil
}

// call makes one setup request and requires a 2xx.
func call(ctx context.Context, method, url, body string, headers [][2]string) ([]byte, error) {
	return callWith(ctx, setupClient, method, url, body, headers)
}

// callWith is call through client.
func callWith(ctx context.Context, client *http.Client, method, url, body string, headers [][2]string) ([]byte, error) {
	resp, data, err := doWith(ctx, client, method, url, body, headers)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s %s: status %d: %.300s", method, url, resp.StatusCode, data)
	}
	return data, nil
}

func do(ctx context.Context, method, url, body string, headers [][2]string) (*http.Response, []byte, error) {
	return doWith(ctx, setupClient, method, url, body, headers)
}

// doWith is do through client.
func doWith(ctx context.Context, client *http.Client, method, url, body string, headers [][2]string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	for _, h := range headers {
		req.Header.Set(h[0], h[1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	return resp, data, nil
}

func sanityCheck(ctx context.Context, t target, w workload) error {
	resp, body, err := do(ctx, w.method, t.base+w.path, w.body, w.headers)
	if err != nil {
		return err
	}
	return w.check(resp, body)
}

// measureTargets warms every target up, then measures in rounds whose
// target order rotates (d n g, n g d, g d n, ...), so load that drifts or
// bursts during the cell lands on all targets alike; a target's rounds are
// combined, and its CPU time over its measured rounds is added up.
func measureTargets(ctx context.Context, targets []target, w workload, script string, conns int) ([]wrkResult, error) {
	return measureTargetsOn(ctx, targets, w, script, conns, nil)
}

// measureTargetsOn is measureTargets with wrk on wrkCPUs (nil: any).
func measureTargetsOn(ctx context.Context, targets []target, w workload, script string, conns int, wrkCPUs []int) ([]wrkResult, error) {
	n := opts.ProxyRounds
	if w.oneRound {
		n = 1
	}
	rounds, err := measureRounds(ctx, targets, w, script, conns, wrkCPUs, n, opts.ProxyMeasure/time.Duration(n))
	if err != nil {
		return nil, err
	}
	out := make([]wrkResult, len(targets))
	for i := range targets {
		out[i] = combineRounds(rounds[i])
	}
	return out, nil
}

// measureRounds warms every target up, then runs n rounds of dur each in
// rotating order; rounds[i][r] is target i's run in round r.
func measureRounds(ctx context.Context, targets []target, w workload, script string, conns int, wrkCPUs []int,
	n int, dur time.Duration) ([][]wrkResult, error) {
	runOnce := func(run wrkRun, t target) (wrkResult, error) {
		var before time.Duration
		if t.cpu != nil {
			var err error
			if before, err = t.cpu(); err != nil {
				return wrkResult{}, err
			}
		}
		res, err := run.run(ctx, t.base+w.path)
		if err != nil {
			return res, err
		}
		if t.cpu != nil {
			after, err := t.cpu()
			if err != nil {
				return res, err
			}
			res.CPUUS = (after - before).Microseconds()
		}
		if w.drain {
			// The requests cut off at the end started less than a tail latency ago.
			err = sleepCtx(ctx, min(usDur(res.P999US), proxyMaxDrain))
		}
		return res, err
	}
	warm := wrkRun{script: script, conns: conns, dur: opts.ProxyWarmup, timeout: proxyTimeout, cpus: wrkCPUs}
	for _, t := range targets {
		if _, err := runOnce(warm, t); err != nil {
			return nil, err
		}
	}
	rounds := make([][]wrkResult, len(targets))
	run := wrkRun{script: script, conns: conns, dur: dur, timeout: proxyTimeout, cpus: wrkCPUs}
	for r := range n {
		for i := range targets {
			ti := (r + i) % len(targets)
			res, err := runOnce(run, targets[ti])
			if err != nil {
				return nil, err
			}
			rounds[ti] = append(rounds[ti], res)
		}
	}
	return rounds, nil
}

// addCellFigures records one target's small-GET cell for the goals and the chart.
func addCellFigures(f map[string]float64, conns int, target string, r wrkResult) {
	f[proxyKey(conns, target, "rps")] = r.RPS()
	f[proxyKey(conns, target, "p50_ms")] = float64(r.P50US) / 1000
	f[proxyKey(conns, target, "p99_ms")] = float64(r.P99US) / 1000
	f[proxyKey(conns, target, "p999_ms")] = float64(r.P999US) / 1000
	if r.CPUUS > 0 && r.Requests > 0 {
		f[proxyKey(conns, target, "cpu_us")] = r.CPUPerRequestUS()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// proxyRow is one cell of the table: direct, nginx and gateway side by side.
func proxyRow(name string, conns int, c []wrkResult) []string {
	lat := func(r wrkResult) string {
		return fmt.Sprintf("%s / %s / %s", ms(usDur(r.P50US)), ms(usDur(r.P99US)), ms(usDur(r.P999US)))
	}
	return []string{name, fmt.Sprint(conns),
		fmt.Sprintf("%.0f", c[0].RPS()), fmt.Sprintf("%.0f", c[1].RPS()), fmt.Sprintf("%.0f", c[2].RPS()),
		ratio(c[2].RPS(), c[1].RPS()), ratio(c[2].RPS(), c[0].RPS()),
		lat(c[0]), lat(c[1]), lat(c[2]),
		ms(usDur(c[2].P99US - c[0].P99US)), ms(usDur(c[1].P99US - c[0].P99US)),
		fmt.Sprintf("%.1f / %.1f", c[1].CPUPerRequestUS(), c[2].CPUPerRequestUS()),
		fmt.Sprintf("%d / %d / %d", c[0].Errors(), c[1].Errors(), c[2].Errors())}
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// cleanupStack runs pushed functions in reverse order, once, with a
// context that survives the run's cancellation (Ctrl-C still cleans up).
type cleanupStack []func(context.Context)

func (s *cleanupStack) push(f func(context.Context)) { *s = append(*s, f) }

func (s *cleanupStack) run() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := len(*s) - 1; i >= 0; i-- {
		(*s)[i](ctx)
	}
	*s = nil
}
