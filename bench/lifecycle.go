package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/statedb"
)

func init() { register("lifecycle", lifecycle) }

// lifecycle measures the pool's paths on a real redis-server: a cached
// acquire, a warm reclaim (pool API and HTTP) and a new thread's first
// request through the gateway (process backend). Three replicas are the
// replicas suite; a large pool is the threads-10k suite.
func lifecycle(ctx context.Context) (Result, error) {
	env, err := startSuiteEnv(ctx, "lifecycle")
	if err != nil {
		return Result{}, err
	}
	defer env.close()
	// Sandboxes outlive a gateway by design: every one made here is
	// destroyed on cleanup, before its parent (gateway or bench) stops.
	tmp, bin, raddr, cleanup := env.tmp, env.bin, env.redisAddr, &env.cleanup
	rdb := redis.NewClient(&redis.Options{Addr: raddr})
	defer rdb.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	res := Result{Title: "Pool lifecycle", Columns: statsColumns}

	// Pool API with the real process backend.
	be, err := process.New(process.Config{Binary: process.SandboxBinary(bin), StateDir: filepath.Join(tmp, "state")}, quiet)
	if err != nil {
		return Result{}, err
	}
	p, err := pool.New(pool.Config{Mounts: backend.MountConfig{DataDir: filepath.Join(tmp, "data")}, MaxSandboxes: -1},
		pool.Deps{Store: statedb.NewStore(rdb, "bench:{lc}:"), Backend: be, BackendName: "process",
			NewTransport: gateway.NewSandboxTransport, Log: quiet})
	if err != nil {
		return Result{}, err
	}
	cleanup.push(func(ctx context.Context) {
		if err := be.Destroy(ctx, backend.Info{SandboxID: identity.SandboxID("bench", "warm")}); err != nil {
			fmt.Fprintf(os.Stderr, "bench: destroy sandbox: %v\n", err)
		}
	})
	if _, _, err := p.Acquire(ctx, "bench", "warm"); err != nil {
		return Result{}, err
	}
	var hit, warm []time.Duration
	for range opts.LifecycleRuns {
		t0 := time.Now()
		if _, o, err := p.Acquire(ctx, "bench", "warm"); err != nil || o != pool.OutcomeHit {
			return Result{}, fmt.Errorf("cached acquire: %v %v", o, err)
		}
		hit = append(hit, time.Since(t0))
		if err := p.Release(ctx, "bench", "warm"); err != nil {
			return Result{}, err
		}
		t0 = time.Now()
		if _, o, err := p.Acquire(ctx, "bench", "warm"); err != nil || o != pool.OutcomeWarm {
			return Result{}, fmt.Errorf("warm reclaim: %v %v", o, err)
		}
		warm = append(warm, time.Since(t0))
	}
	res.Rows = append(res.Rows,
		statsRow("cached acquire (replica cache hit, no Redis)", summarize(hit)),
		statsRow("warm reclaim, pool API (Redis read + liveness + Lua activate)", summarize(warm)))

	// Through the gateway, over HTTP.
	gs, gaddr, err := startGateway(ctx, bin, raddr, filepath.Join(tmp, "gw"), filepath.Join(tmp, "gateway.log"))
	if err != nil {
		return Result{}, err
	}
	cleanup.push(func(context.Context) { gs.stop(syscall.SIGTERM, 5*time.Second) })
	base := "http://" + gaddr
	threads := []string{"warm-http"}
	cleanup.push(func(ctx context.Context) { destroyThreads(ctx, base, threads) })
	if _, err := call(ctx, "PUT", base+"/threads/warm-http/sandbox", "", nil); err != nil {
		return Result{}, err
	}
	var warmHTTP, cold []time.Duration
	for range opts.LifecycleRuns {
		if _, err := call(ctx, "DELETE", base+"/threads/warm-http/sandbox", "", nil); err != nil {
			return Result{}, err
		}
		t0 := time.Now()
		body, err := call(ctx, "PUT", base+"/threads/warm-http/sandbox", "", nil)
		if err != nil || !strings.Contains(string(body), `"outcome":"warm"`) {
			return Result{}, fmt.Errorf("warm reclaim over HTTP: %v %s", err, body)
		}
		warmHTTP = append(warmHTTP, time.Since(t0))
	}
	for i := range opts.LifecycleColdRuns {
		thread := "cold-" + strconv.Itoa(i)
		threads = append(threads, thread)
		t0 := time.Now()
		if _, err := call(ctx, "GET", base+"/threads/"+thread+"/v1/sandbox", "", nil); err != nil {
			return Result{}, err
		}
		cold = append(cold, time.Since(t0))
	}
	// One gateway at a time on the 2 cores: this one's sandboxes go first.
	destroyThreads(ctx, base, threads)
	threads = nil
	gs.stop(syscall.SIGTERM, 5*time.Second)
	prewarmedFirst, prewarmedNew, err := firstRequestsPrewarmed(ctx, env, rdb)
	if err != nil {
		return Result{}, err
	}
	burst, err := prewarmBurst(ctx, env)
	if err != nil {
		return Result{}, err
	}
	res.Rows = append(res.Rows,
		statsRow("warm reclaim, HTTP PUT /threads/{t}/sandbox", summarize(warmHTTP)),
		statsRow("new thread: first GET /threads/{t}/v1/sandbox (process cold create)", summarize(cold)),
		statsRow(fmt.Sprintf("new thread: first GET /threads/{t}/v1/sandbox (claims a pre-started sandbox, --prewarm %d), kept-alive client connection", lifecyclePrewarm),
			summarize(prewarmedFirst)),
		statsRow(fmt.Sprintf("new thread: first GET /threads/{t}/v1/sandbox (claims a pre-started sandbox, --prewarm %d), new client connection", lifecyclePrewarm),
			summarize(prewarmedNew)))
	res.Rows = append(res.Rows, burst.rows()...)

	w, wh, c, pw, pn := summarize(warm), summarize(warmHTTP), summarize(cold), summarize(prewarmedFirst), summarize(prewarmedNew)
	res.Figures = map[string]float64{figWarmPoolP99: msF(w.P99), figWarmHTTPP99: msF(wh.P99),
		figFirstColdP50: msF(c.P50), figFirstColdP99: msF(c.P99), figFirstPrewarmP50: msF(pw.P50), figFirstPrewarmP99: msF(pw.P99),
		figFirstPrewarmNewP50: msF(pn.P50), figFirstPrewarmNewP99: msF(pn.P99)}
	burst.figures(res.Figures)
	res.Notes = append(res.Notes,
		"The goal (warm reclaim < 5 ms p99) is evaluated in the Goals table at the top, from the pool API row.",
		fmt.Sprintf("%d runs each for the pool and HTTP rows, %d new threads for each first-request row; real redis-server %s, real process backend.",
			opts.LifecycleRuns, opts.LifecycleColdRuns, toolVersion(ctx, "redis-server", "--version")),
		fmt.Sprintf("The prewarmed row is a second gateway (`--prewarm %d`, its own Redis prefix and data dir): before each new thread the bench waits "+
			"until the pool is full again (it refills in the background after every claim, a create that would otherwise share the 2 cores "+
			"with the timed request), then times the thread's first GET. "+
			"The claim is a Lua script taking the sandbox (its capacity unit becomes the thread's), the rename of its user-data dir to the thread's "+
			"beneath its running bind mounts, the process backend's claim (its state file rewritten under the thread's id and labels) and the "+
			"active record; then the request is proxied as any other. The kept-alive row sends every GET on the bench's one client connection; "+
			"the new-connection row dials the gateway for each (the connect is in the time). "+
			"The goal (first request of a new thread < %g ms p50, < %g ms p99, both rows) is in the Goals table.",
			lifecyclePrewarm, goalPrewarmP50MS, goalPrewarmP99MS),
		burst.note(),
	)
	return res, nil
}

// destroyThreads destroys the threads' sandboxes through a gateway (their
// parent, which reaps them); a thread that never got one is skipped.
func destroyThreads(ctx context.Context, base string, threads []string) {
	for _, t := range threads {
		resp, body, err := do(ctx, http.MethodDelete, base+"/threads/"+t+"/sandbox?destroy=true", "", nil)
		if err != nil || (resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusNotFound) {
			fmt.Fprintf(os.Stderr, "bench: destroy thread %s: %v %.200s\n", t, err, body)
		}
	}
}

// lifecyclePrewarm is the prewarm pool of the prewarmed first-request row.
const lifecyclePrewarm = 2

// firstRequestsPrewarmed times new threads' first requests on a gateway
// with a prewarm pool, each once a pre-started sandbox is ready.
func firstRequestsPrewarmed(ctx context.Context, env *suiteEnv, rdb *redis.Client) (kept, fresh []time.Duration, err error) {
	const prefix = "bench:{lcpw}:"
	gs, gaddr, err := startGatewayEnv(ctx, env.bin, env.redisAddr, filepath.Join(env.tmp, "gw-prewarm"),
		filepath.Join(env.tmp, "gateway-prewarm.log"), nil, "--prewarm", strconv.Itoa(lifecyclePrewarm), "--redis-prefix", prefix)
	if err != nil {
		return nil, nil, err
	}
	base := "http://" + gaddr
	var threads []string
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		destroyThreads(dctx, base, threads)
		gs.stop(syscall.SIGTERM, 5*time.Second)
		// The pool's unclaimed sandboxes outlive the gateway by design. The
		// backend that destroys them runs the gateway's binary: with the
		// bench's own, its isolation probe failed and they were left running.
		if err := destroyAll(dctx, process.Config{Binary: env.bin, StateDir: filepath.Join(env.tmp, "gw-prewarm", "sandboxes", "process")}); err != nil {
			fmt.Fprintf(os.Stderr, "bench: lifecycle: pre-started sandboxes left running: %v\n", err)
		}
	}()
	keys := statedb.NewKeys(prefix, 0)
	if kept, err = prewarmedFirsts(ctx, setupClient, base, rdb, keys, lifecyclePrewarm, opts.LifecycleColdRuns, "prewarmed-", &threads, nil); err != nil {
		return nil, nil, err
	}
	fresh, err = prewarmedFirsts(ctx, newConnClient, base, rdb, keys, lifecyclePrewarm, opts.LifecycleColdRuns, "prewarmed-new-", &threads, nil)
	return kept, fresh, err
}

// newConnClient dials for every request: a new client's first request.
var newConnClient = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}, Timeout: time.Minute}

// prewarmedFirsts times runs new threads' first GET through the gateway
// at base (sent by client), whose pool of size pre-started sandboxes (Redis keys) is full
// before each: the claim is timed alone, not beside a refill. Each thread
// must get a pre-started sandbox. The threads are appended to threads;
// after, when set, is called with each once it is checked (a node's CPU
// may not hold them all).
func prewarmedFirsts(ctx context.Context, client *http.Client, base string, rdb *redis.Client, keys statedb.Keys, size, runs int, prefix string,
	threads *[]string, after func(thread string)) ([]time.Duration, error) {
	var out []time.Duration
	for i := range runs {
		if err := waitPoolFull(ctx, rdb, keys, size, time.Minute); err != nil {
			return nil, err
		}
		ready, err := prewarmIncarnations(ctx, rdb, keys)
		if err != nil {
			return nil, err
		}
		thread := prefix + strconv.Itoa(i)
		*threads = append(*threads, thread)
		t0 := time.Now()
		if _, err := callWith(ctx, client, "GET", base+"/threads/"+thread+"/v1/sandbox", "", nil); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
		// The row is only honest if every thread got a pre-started sandbox.
		inc, err := rdb.HGet(ctx, keys.Sandbox(identity.SandboxID("default", thread)), "incarnation").Result()
		if err != nil || !ready[inc] {
			return nil, fmt.Errorf("thread %s was not given a pre-started sandbox (incarnation %q, %v)", thread, inc, err)
		}
		if after != nil {
			after(thread)
		}
	}
	return out, nil
}

// prewarmIncarnations are the incarnations of the unclaimed pre-started sandboxes.
func prewarmIncarnations(ctx context.Context, rdb *redis.Client, keys statedb.Keys) (map[string]bool, error) {
	ids, err := rdb.ZRange(ctx, keys.Prewarm(), 0, -1).Result()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, id := range ids {
		inc, err := rdb.HGet(ctx, keys.Sandbox(id), "incarnation").Result()
		if err != nil {
			return nil, err
		}
		out[inc] = true
	}
	return out, nil
}

// destroyAll destroys every sandbox of the process backend configured so.
func destroyAll(ctx context.Context, cfg process.Config) error {
	be, err := process.New(cfg, nil)
	if err != nil {
		return err
	}
	list, err := be.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, info := range list {
		errs = append(errs, be.Destroy(ctx, info))
	}
	return errors.Join(errs...)
}
