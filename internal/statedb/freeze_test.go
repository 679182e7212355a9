package statedb

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/state"
)

// The freeze mark's rules, on both servers: only an active record of the
// given incarnation not routed to since the cutoff is marked; a marked
// record refuses Activate (no replica routes to it until it is thawed);
// a same-incarnation rewrite keeps the mark, a new incarnation drops it;
// the freezer's window reads only what went idle since its last look.
func TestFreezeMark(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		t0 := time.UnixMilli(100_000)
		if err := s.PutActive(ctx, rec("a", "i1"), t0); err != nil {
			t.Fatal(err)
		}
		// Written at t0: seen then, so a cutoff before t0 does not mark it.
		if ok, err := s.Freeze(ctx, "a", "i1", t0.Add(-time.Millisecond), t0); ok || err != nil {
			t.Fatalf("freeze of a record routed to after the cutoff: %v %v", ok, err)
		}
		if ok, _ := s.Freeze(ctx, "a", "other", t0, t0); ok {
			t.Fatal("freeze of another incarnation")
		}
		// Activate (every replica's route check) moves seen_ms forward.
		t1 := t0.Add(10 * time.Second)
		if ok, err := s.Activate(ctx, "a", "i1", t1); !ok || err != nil {
			t.Fatalf("activate: %v %v", ok, err)
		}
		if ok, _ := s.Freeze(ctx, "a", "i1", t1.Add(-time.Second), t1); ok {
			t.Fatal("freeze with a cutoff before the last activation")
		}
		t2 := t1.Add(time.Minute)
		if ok, err := s.Freeze(ctx, "a", "i1", t1, t2); !ok || err != nil {
			t.Fatalf("freeze: %v %v", ok, err)
		}
		got, _, _ := s.Get(ctx, "a")
		if !got.Frozen.Equal(t2) || got.State != state.StateActive {
			t.Fatalf("frozen record: %+v", got)
		}
		if ok, _ := s.Freeze(ctx, "a", "i1", t2, t2); ok {
			t.Fatal("froze a frozen record twice")
		}
		if ok, err := s.Activate(ctx, "a", "i1", t2); ok || err != nil {
			t.Fatalf("activate of a frozen record: %v %v (want refused)", ok, err)
		}
		// Released while frozen, the mark stays; reclaim is refused too.
		if ok, err := s.Release(ctx, "a", "u", "t-a", t2); !ok || err != nil {
			t.Fatalf("release of a frozen record: %v %v", ok, err)
		}
		if ok, _ := s.Activate(ctx, "a", "i1", t2); ok {
			t.Fatal("reclaim of a frozen warm record")
		}
		if ok, err := s.Thaw(ctx, "a", "other"); ok || err != nil {
			t.Fatalf("thaw of another incarnation: %v %v", ok, err)
		}
		if ok, err := s.Thaw(ctx, "a", "i1"); !ok || err != nil {
			t.Fatalf("thaw: %v %v", ok, err)
		}
		if ok, err := s.Activate(ctx, "a", "i1", t2); !ok || err != nil {
			t.Fatalf("activate after thaw: %v %v", ok, err)
		}
		if got, _, _ := s.Get(ctx, "a"); !got.Frozen.IsZero() || got.State != state.StateActive {
			t.Fatalf("after thaw and activate: %+v", got)
		}

		// A rewrite under the lock keeps the mark of the same incarnation
		// (its processes are still frozen) and drops it for a new one.
		t3 := t2.Add(time.Minute)
		if ok, _ := s.Freeze(ctx, "a", "i1", t3, t3); !ok {
			t.Fatal("refreeze")
		}
		if err := s.PutActive(ctx, rec("a", "i1"), t3); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := s.Get(ctx, "a"); got.Frozen.IsZero() {
			t.Fatal("same-incarnation rewrite dropped the freeze mark")
		}
		if err := s.PutActive(ctx, rec("a", "i2"), t3); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := s.Get(ctx, "a"); !got.Frozen.IsZero() {
			t.Fatal("a new incarnation inherited the freeze mark")
		}
	})
}

func TestIdleSinceWindow(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		base := time.UnixMilli(1_000_000)
		for i, sid := range []string{"w1", "w2", "w3"} {
			if err := s.PutActive(ctx, rec(sid, "i"), base.Add(time.Duration(i)*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		all := make([]int, s.Keys().Buckets())
		for i := range all {
			all[i] = i
		}
		ids := func(from map[int]time.Time, to time.Time) []string {
			res, err := s.IdleSince(ctx, all, from, to, 100)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, b := range res {
				for _, e := range b {
					out = append(out, e.SandboxID)
				}
			}
			return out
		}
		if got := ids(nil, base.Add(time.Second)); len(got) != 2 {
			t.Fatalf("idle up to base+1s: %v, want w1 w2", got)
		}
		since := map[int]time.Time{}
		for _, b := range all {
			since[b] = base.Add(time.Second)
		}
		if got := ids(since, base.Add(time.Hour)); len(got) != 1 || got[0] != "w3" {
			t.Fatalf("idle since base+1s: %v, want w3 only", got)
		}
		if seen, ok, err := s.Activity(ctx, "w2"); !ok || err != nil || !seen.Equal(base.Add(time.Second)) {
			t.Fatalf("activity of w2: %v %v %v", seen, ok, err)
		}
		if _, ok, _ := s.Activity(ctx, "nope"); ok {
			t.Fatal("activity of an unknown sandbox")
		}
	})
}
