package statedb

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/state"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/testutil"
)

// servers runs f against a real redis-server and against the embedded
// miniredis, because the gateway uses both and the scripts must agree.
func servers(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		r := testutil.StartRedis(t)
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
		t.Cleanup(func() { rdb.Close() })
		f(t, NewStore(rdb, ""))
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		f(t, NewStore(rdb, ""))
	})
}

func rec(sid, inc string) state.Record {
	return state.Record{SandboxID: sid, User: "u", Thread: "t-" + sid, Backend: "process",
		Incarnation: inc, URL: "http://127.0.0.1:1", CreatedAt: time.UnixMilli(1000)}
}

func TestLifecycleScripts(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		t0 := time.UnixMilli(10_000)
		if err := s.PutActive(ctx, rec("a", "i1"), t0); err != nil {
			t.Fatal(err)
		}
		got, ok, err := s.Get(ctx, "a")
		if err != nil || !ok || got.State != state.StateActive || got.Incarnation != "i1" || got.User != "u" {
			t.Fatalf("get after put: %+v %v %v", got, ok, err)
		}
		if ok, _ := s.Activate(ctx, "a", "other", t0); ok {
			t.Fatal("activate with wrong incarnation succeeded")
		}
		if ok, err := s.Release(ctx, "a", "u", "t-a", t0.Add(time.Second)); !ok || err != nil {
			t.Fatalf("release: %v %v", ok, err)
		}
		if got, _, _ := s.Get(ctx, "a"); got.State != state.StateWarm {
			t.Fatalf("state after release = %q", got.State)
		}
		if ok, _ := s.Release(ctx, "missing", "u", "t-missing", t0); ok {
			t.Fatal("release of a missing record succeeded")
		}
		if ok, err := s.Activate(ctx, "a", "i1", t0.Add(2*time.Second)); !ok || err != nil {
			t.Fatalf("activate: %v %v", ok, err)
		}
		c, _ := s.Count(ctx)
		if c != (state.Counts{Active: 1}) {
			t.Fatalf("counts = %+v", c)
		}
		// Touch: a matching entry refreshes, a stale incarnation and a missing one are reported.
		stale, err := s.Touch(ctx, []state.TouchEntry{{SandboxID: "a", Incarnation: "i1"}, {SandboxID: "a", Incarnation: "old"}, {SandboxID: "zz", Incarnation: "x"}}, t0.Add(5*time.Second))
		if err != nil || fmt.Sprint(stale) != "[1 2]" {
			t.Fatalf("touch stale = %v, %v", stale, err)
		}
		if ids, _ := s.Expired(ctx, s.Keys().Bucket("a"), state.IndexActive, t0.Add(4*time.Second), 10); len(ids) != 0 {
			t.Fatalf("touched sandbox listed as expired: %v", ids)
		}
		// Touch never moves activity backwards (GT).
		_, _ = s.Touch(ctx, []state.TouchEntry{{SandboxID: "a", Incarnation: "i1"}}, t0)
		if ids, _ := s.Expired(ctx, s.Keys().Bucket("a"), state.IndexActive, t0.Add(4*time.Second), 10); len(ids) != 0 {
			t.Fatalf("touch moved activity backwards: %v", ids)
		}
		if _, ok, _ := s.ClaimExpired(ctx, "a", state.IndexActive, t0.Add(4*time.Second), t0); ok {
			t.Fatal("claimed an unexpired sandbox")
		}
		r, ok, err := s.ClaimExpired(ctx, "a", state.IndexActive, t0.Add(5*time.Second), t0)
		if !ok || err != nil || r.State != state.StateDestroying || r.Incarnation != "i1" {
			t.Fatalf("claim expired: %+v %v %v", r, ok, err)
		}
		if _, ok, _ := s.ClaimExpired(ctx, "a", state.IndexActive, t0.Add(5*time.Second), t0); ok {
			t.Fatal("claimed twice")
		}
		if ok, _ := s.Forget(ctx, "a", "other"); ok {
			t.Fatal("forgot with wrong incarnation")
		}
		if ok, _ := s.Forget(ctx, "a", "i1"); !ok {
			t.Fatal("forget failed")
		}
		if _, ok, _ := s.Get(ctx, "a"); ok {
			t.Fatal("record still there after forget")
		}
		// PutWarm never overwrites an existing record.
		_ = s.PutActive(ctx, rec("b", "i2"), t0)
		if wrote, _ := s.PutWarm(ctx, rec("b", "i3"), t0); wrote {
			t.Fatal("PutWarm overwrote a record")
		}
		if wrote, _ := s.PutWarm(ctx, rec("c", "i4"), t0); !wrote {
			t.Fatal("PutWarm did not write")
		}
		list, err := s.List(ctx)
		if err != nil || len(list) != 2 {
			t.Fatalf("list = %v, %v", list, err)
		}
	})
}

func TestReserve(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(100_000)
		dl := now.Add(time.Minute)
		_ = s.PutActive(ctx, rec("a1", "i"), now)
		_ = s.PutActive(ctx, rec("w1", "i"), now)
		_ = s.PutActive(ctx, rec("w2", "i"), now)
		_, _ = s.Release(ctx, "w2", "u", "t-w2", now.Add(1*time.Second))
		_, _ = s.Release(ctx, "w1", "u", "t-w1", now.Add(2*time.Second))
		steps := []struct {
			sid  string
			max  int
			hard bool
			want state.ReserveResult
		}{
			{"n1", 0, true, state.ReserveResult{Outcome: "ok"}},                  // no cap
			{"n2", 5, true, state.ReserveResult{Outcome: "ok"}},                  // 3 records + n1 + n2 = 5
			{"n3", 5, true, state.ReserveResult{Outcome: "evict", Victim: "w2"}}, // oldest released first
			{"n2", 5, true, state.ReserveResult{Outcome: "ok"}},                  // re-reserve is idempotent
		}
		for _, st := range steps {
			got, err := s.Reserve(ctx, state.ReserveRequest{SandboxID: st.sid, User: "u", Max: st.max, Hard: st.hard, Now: now, Deadline: dl})
			if err != nil || got != st.want {
				t.Fatalf("reserve %s: got %+v %v want %+v", st.sid, got, err, st.want)
			}
		}
		_, _, _ = s.Claim(ctx, "w2", "")
		_, _ = s.Forget(ctx, "w2", "")
		_, _, _ = s.Claim(ctx, "w1", "")
		_, _ = s.Forget(ctx, "w1", "")
		if got, _ := s.Reserve(ctx, state.ReserveRequest{SandboxID: "n3", User: "u", Max: 3, Hard: true, Now: now, Deadline: dl}); got.Outcome != "full" {
			t.Fatalf("hard cap with nothing warm: %+v", got)
		}
		if got, _ := s.Reserve(ctx, state.ReserveRequest{SandboxID: "n3", User: "u", Max: 3, Now: now, Deadline: dl}); got.Outcome != "over" {
			t.Fatalf("soft cap with nothing warm: %+v", got)
		}
		// A reservation of a crashed replica expires at its deadline.
		if got, _ := s.Reserve(ctx, state.ReserveRequest{SandboxID: "n4", User: "u", Max: 4, Hard: true, Now: dl.Add(time.Millisecond), Deadline: dl.Add(time.Minute)}); got.Outcome != "ok" {
			t.Fatalf("expired reservations still counted: %+v", got)
		}
		if err := s.Unreserve(ctx, "n4", "u"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLockRefreshedWhileHeld holds a lock for longer than its TTL on a real
// redis-server, whose clock expires keys (miniredis's does not advance by
// itself): only the refresher can keep the key. The TTL leaves a refresh
// (every TTL/3) two seconds of slack on a loaded machine.
func TestLockRefreshedWhileHeld(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	s := NewStore(rdb, "")
	ctx := context.Background()
	const ttl = 3 * time.Second
	h, err := NewLocker(s, ttl).Obtain(ctx, "x", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Release(ctx) }()
	obtained := time.Now()
	key := s.keys.Lock("x")
	// Watch the key until it has outlived its TTL one and a half times.
	for time.Since(obtained) < ttl*3/2 {
		left, err := rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if left <= 0 {
			t.Fatalf("lock expired %s after it was obtained, while held", time.Since(obtained).Round(time.Millisecond))
		}
		select {
		case <-h.Lost():
			t.Fatal("the refresher lost the lock")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := NewLocker(s, ttl).Obtain(ctx, "x", 0); err != state.ErrLocked {
		t.Fatalf("obtain while held past its TTL: %v", err)
	}
}

func TestLockExclusive(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		l := NewLocker(s, 0)
		h, err := l.Obtain(ctx, "x", 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Obtain(ctx, "x", 0); err != state.ErrLocked {
			t.Fatalf("second obtain: %v", err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if h, err := l.Obtain(ctx, "x", 0); err != nil {
			t.Fatalf("obtain after release: %v", err)
		} else {
			_ = h.Release(ctx)
		}
		// Contenders that arrive together: never two holders at once.
		var holding, most atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				h, err := l.Obtain(ctx, "y", 2*time.Second)
				if err != nil {
					return
				}
				n := holding.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(20 * time.Millisecond)
				holding.Add(-1)
				_ = h.Release(ctx)
			}()
		}
		close(start)
		wg.Wait()
		if most.Load() != 1 {
			t.Fatalf("%d holders of one lock at once", most.Load())
		}
	})
}
