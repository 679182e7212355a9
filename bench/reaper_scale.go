package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/statedb"
)

// reaperAtScale writes records records straight to the store, then times
// reaper passes with nothing expired and with expiredN expired; it returns
// Redis memory per record too.
func reaperAtScale(ctx context.Context, rdb *redis.Client, log *slog.Logger, records, expiredN int) (int64, []time.Duration, time.Duration, error) {
	prefix := "bench:{reap}:"
	store := statedb.NewStore(rdb, prefix)
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return 0, nil, 0, err
	}
	clock := &benchClock{now: time.Now()}
	for i := range records {
		thread := "t" + strconv.Itoa(i)
		rec := state.Record{SandboxID: identity.SandboxID("bench", thread), User: "bench", Thread: thread,
			Backend: "null", Incarnation: "inc-" + strconv.Itoa(i), URL: "http://127.0.0.1:1", State: state.StateActive,
			CreatedAt: clock.now}
		at := clock.now
		if i < expiredN {
			at = at.Add(-10 * time.Minute) // expired once the clock moves 25 minutes on
		}
		if err := store.PutActive(ctx, rec, at); err != nil {
			return 0, nil, 0, err
		}
	}
	after, err := usedMemory(ctx, rdb)
	if err != nil {
		return 0, nil, 0, err
	}
	p, err := pool.New(pool.Config{Mounts: backend.MountConfig{DataDir: os.TempDir()}, IdleTimeout: 30 * time.Minute},
		pool.Deps{Store: store, Backend: nullBackend{}, Clock: clock, Log: log})
	if err != nil {
		return 0, nil, 0, err
	}
	r := pool.NewReaper(p)
	var idle []time.Duration
	for range 20 {
		t0 := time.Now()
		if n, err := r.Pass(ctx); err != nil || n != 0 {
			return 0, nil, 0, fmt.Errorf("idle pass reaped %d: %v", n, err)
		}
		idle = append(idle, time.Since(t0))
	}
	clock.now = clock.now.Add(25 * time.Minute)
	t0 := time.Now()
	if n, err := r.Pass(ctx); err != nil || n != expiredN {
		return 0, nil, 0, fmt.Errorf("expired pass reaped %d: %v", n, err)
	}
	return (after - before) / int64(records), idle, time.Since(t0), nil
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
