package statedb

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/state"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/testutil"
)

func TestOnErrorCountsRedisFailuresOnly(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	var errs atomic.Int32
	OnError(rdb, func() { errs.Add(1) })
	s := NewStore(rdb, "")
	ctx := context.Background()

	// Answers, not failures: a nil reply, a script loaded on first use
	// (NOSCRIPT, then EVAL), a lock held elsewhere, a cancelled caller.
	if _, ok, err := s.Get(ctx, "0123456789abcdef"); err != nil || ok {
		t.Fatalf("get missing: %v %v", ok, err)
	}
	if _, err := s.Release(ctx, "0123456789abcdef", "u", "t", time.Now()); err != nil {
		t.Fatal(err)
	}
	l := NewLocker(s, time.Second)
	held, err := l.Obtain(ctx, "0123456789abcdef", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Obtain(ctx, "0123456789abcdef", 0); err != state.ErrLocked {
		t.Fatalf("second obtain: %v", err)
	}
	_ = held.Release(ctx)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, _, _ = s.Get(cancelled, "0123456789abcdef")
	if n := errs.Load(); n != 0 {
		t.Fatalf("%d errors counted for answers", n)
	}

	// Failures: a command Redis refuses, a pipeline, and Redis gone.
	if err := rdb.Do(ctx, "NO-SUCH-COMMAND").Err(); err == nil {
		t.Fatal("unknown command succeeded")
	}
	if n := errs.Load(); n != 1 {
		t.Fatalf("refused command: %d errors counted, want 1", n)
	}
	r.Stop()
	if _, err := s.Count(ctx); err == nil {
		t.Fatal("count with Redis down succeeded")
	}
	if _, _, err := s.Get(ctx, "0123456789abcdef"); err == nil {
		t.Fatal("get with Redis down succeeded")
	}
	if n := errs.Load(); n != 3 {
		t.Fatalf("Redis down: %d errors counted, want 3", n)
	}
}
