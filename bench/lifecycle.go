package main

import (
	"context"
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
	"github.com/sandgate/sandgate/internal/lease"
	"github.com/sandgate/sandgate/internal/pool"
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
		pool.Deps{Store: lease.NewStore(rdb, "bench:{lc}:"), Backend: be, BackendName: "process",
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
	res.Rows = append(res.Rows,
		statsRow("warm reclaim, HTTP PUT /threads/{t}/sandbox", summarize(warmHTTP)),
		statsRow("new thread: first GET /threads/{t}/v1/sandbox (process cold create)", summarize(cold)))

	w, wh := summarize(warm), summarize(warmHTTP)
	res.Figures = map[string]float64{figWarmPoolP99: msF(w.P99), figWarmHTTPP99: msF(wh.P99)}
	res.Notes = append(res.Notes,
		"The goal (warm reclaim < 5 ms p99) is evaluated in the Goals table at the top, from the pool API row.",
		fmt.Sprintf("%d runs each for the pool and HTTP rows, %d new threads for the cold row; real redis-server %s, real process backend.",
			opts.LifecycleRuns, opts.LifecycleColdRuns, toolVersion(ctx, "redis-server", "--version")),
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
