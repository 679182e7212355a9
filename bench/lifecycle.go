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
	"github.com/sandgate/sandgate/internal/lease"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/proxy"
)

const (
	lifecycleRuns      = 200
	lifecycleColdRuns  = 30
	reaperRecords      = 10_000
	reaperExpired      = 1_000
	warmReclaimGoalP99 = 5 * time.Millisecond
)

func init() { register("lifecycle", lifecycle) }

// lifecycle measures the pool's paths on a real redis-server: a cached
// acquire, a warm reclaim (pool API and HTTP), a new thread's first request
// through the gateway (process backend), and the cost of a large pool:
// Redis memory per record and reaper passes over 10,000 records.
func lifecycle(ctx context.Context) (Result, error) {
	tmp, err := os.MkdirTemp("", "sandgate-lifecycle-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(tmp)
	rs, raddr, err := startRedis(ctx, tmp)
	if err != nil {
		return Result{}, err
	}
	defer rs.stop(syscall.SIGKILL, 0)
	bin, err := buildGateway(ctx, tmp)
	if err != nil {
		return Result{}, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: raddr})
	defer rdb.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	res := Result{Title: "Pool lifecycle", Columns: statsColumns}

	// Pool API with the real process backend.
	be, err := process.New(process.Config{Binary: bin, StateDir: filepath.Join(tmp, "state")}, quiet)
	if err != nil {
		return Result{}, err
	}
	p, err := pool.New(pool.Config{Mounts: backend.MountConfig{DataDir: filepath.Join(tmp, "data")}, MaxSandboxes: -1},
		pool.Deps{Store: lease.NewStore(rdb, "bench:{lc}:"), Backend: be, BackendName: "process",
			NewTransport: func() http.RoundTripper { return proxy.NewTransport(proxy.TransportConfig{}) }, Log: quiet})
	if err != nil {
		return Result{}, err
	}
	if _, _, err := p.Acquire(ctx, "bench", "warm"); err != nil {
		return Result{}, err
	}
	var hit, warm []time.Duration
	for range lifecycleRuns {
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
	defer gs.stop(syscall.SIGTERM, 5*time.Second)
	base := "http://" + gaddr
	if _, err := call(ctx, "PUT", base+"/threads/warm-http/sandbox", "", nil); err != nil {
		return Result{}, err
	}
	var warmHTTP, cold []time.Duration
	for range lifecycleRuns {
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
	for i := range lifecycleColdRuns {
		t0 := time.Now()
		if _, err := call(ctx, "GET", base+"/threads/cold-"+strconv.Itoa(i)+"/v1/sandbox", "", nil); err != nil {
			return Result{}, err
		}
		cold = append(cold, time.Since(t0))
	}
	res.Rows = append(res.Rows,
		statsRow("warm reclaim, HTTP PUT /threads/{t}/sandbox", summarize(warmHTTP)),
		statsRow("new thread: first GET /threads/{t}/v1/sandbox (process cold create)", summarize(cold)))

	// A large pool: 10,000 records, reaper passes.
	mem, passIdle, passExpired, err := reaperAtScale(ctx, rdb, quiet)
	if err != nil {
		return Result{}, err
	}
	res.Rows = append(res.Rows,
		statsRow(fmt.Sprintf("reaper pass, %d records, none expired", reaperRecords), summarize(passIdle)),
		statsRow(fmt.Sprintf("reaper pass, %d records, %d expired (no-op destroy)", reaperRecords, reaperExpired), summarize(passExpired)))

	w := summarize(warm)
	verdict := "met"
	if w.P99 >= warmReclaimGoalP99 {
		verdict = fmt.Sprintf("missed by %s", ms(w.P99-warmReclaimGoalP99)+" ms")
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("Goal: warm reclaim < 5 ms p99 — %s (pool API p99 %s ms; over HTTP p99 %s ms).", verdict, ms(w.P99), ms(summarize(warmHTTP).P99)),
		fmt.Sprintf("Redis memory per sandbox record (hash + index entries): %d bytes, from INFO used_memory before and after writing %d records.", mem, reaperRecords),
		"The reaper reads only the expired range of each index (ZRANGEBYSCORE with a limit), so a pass over a large pool with nothing expired costs two small reads; with expired sandboxes it costs a lock, a claim script and a destroy each.",
		fmt.Sprintf("%d runs each for the pool and HTTP rows, %d new threads for the cold row; real redis-server %s, real process backend.", lifecycleRuns, lifecycleColdRuns, toolVersion(ctx, "redis-server", "--version")),
	)
	return res, nil
}

// reaperAtScale writes reaperRecords records, then times reaper passes with
// nothing expired and with reaperExpired expired.
func reaperAtScale(ctx context.Context, rdb *redis.Client, log *slog.Logger) (int64, []time.Duration, []time.Duration, error) {
	prefix := "bench:{reap}:"
	store := lease.NewStore(rdb, prefix)
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return 0, nil, nil, err
	}
	clock := &benchClock{now: time.Now()}
	for i := range reaperRecords {
		thread := "t" + strconv.Itoa(i)
		rec := lease.Record{SandboxID: lease.SandboxID("bench", thread), User: "bench", Thread: thread,
			Backend: "null", Incarnation: "inc-" + strconv.Itoa(i), URL: "http://127.0.0.1:1", State: lease.StateActive,
			CreatedAt: clock.now}
		at := clock.now
		if i < reaperExpired {
			at = at.Add(-10 * time.Minute) // expired once the clock moves 25 minutes on
		}
		if err := store.PutActive(ctx, rec, at); err != nil {
			return 0, nil, nil, err
		}
	}
	after, err := usedMemory(ctx, rdb)
	if err != nil {
		return 0, nil, nil, err
	}
	p, err := pool.New(pool.Config{Mounts: backend.MountConfig{DataDir: os.TempDir()}, IdleTimeout: 30 * time.Minute},
		pool.Deps{Store: store, Backend: nullBackend{}, Clock: clock, Log: log})
	if err != nil {
		return 0, nil, nil, err
	}
	r := pool.NewReaper(p)
	var idle, expired []time.Duration
	for range 20 {
		t0 := time.Now()
		if n, err := r.Pass(ctx); err != nil || n != 0 {
			return 0, nil, nil, fmt.Errorf("idle pass reaped %d: %v", n, err)
		}
		idle = append(idle, time.Since(t0))
	}
	clock.now = clock.now.Add(25 * time.Minute)
	t0 := time.Now()
	if n, err := r.Pass(ctx); err != nil || n != reaperExpired {
		return 0, nil, nil, fmt.Errorf("expired pass reaped %d: %v", n, err)
	}
	expired = append(expired, time.Since(t0))
	return (after - before) / reaperRecords, idle, expired, nil
}

func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO")
}

type benchClock struct{ now time.Time }

func (c *benchClock) Now() time.Time { return c.now }

// nullBackend answers instantly: the reaper rows measure the pool and
// Redis, not a runtime's destroy.
type nullBackend struct{}

func (nullBackend) Create(context.Context, backend.Spec) (backend.Info, error) {
	return backend.Info{}, fmt.Errorf("null backend creates nothing")
}
func (nullBackend) Destroy(context.Context, backend.Info) error       { return nil }
func (nullBackend) Alive(context.Context, backend.Info) (bool, error) { return true, nil }
func (nullBackend) Discover(context.Context, string) (backend.Info, bool, error) {
	return backend.Info{}, false, nil
}
func (nullBackend) List(context.Context) ([]backend.Info, error) { return nil, nil }
