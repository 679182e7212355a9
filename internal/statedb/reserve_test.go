package statedb

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/state"
)

func userRec(user, sid string) state.Record {
	r := rec(sid, "i")
	r.User = user
	return r
}

// TestReservePerUser drives the per-user limits and their bookkeeping: a
// reservation counts, a recorded sandbox counts, a forgotten or unreserved
// one stops counting, and a user at its limit evicts its own warm sandbox
// before it is refused.
func TestReservePerUser(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(100_000)
		req := func(user, sid string) state.ReserveRequest {
			return state.ReserveRequest{SandboxID: sid, User: user, MaxPerUser: 3, MaxCreatesPerUser: 2, Now: now, Deadline: now.Add(time.Minute)}
		}
		_ = s.PutActive(ctx, userRec("a", "a1"), now)
		steps := []struct {
			user, sid string
			want      state.ReserveResult
		}{
			{"a", "a2", state.ReserveResult{Outcome: "ok"}},                    // 1 active + 1 creating
			{"a", "a3", state.ReserveResult{Outcome: "ok"}},                    // 2 creating
			{"a", "a4", state.ReserveResult{Outcome: "user_max", Held: 3}},     // 3 held
			{"b", "b1", state.ReserveResult{Outcome: "ok"}},                    // another user is unaffected
			{"b", "b2", state.ReserveResult{Outcome: "ok"}},                    //
			{"b", "b3", state.ReserveResult{Outcome: "user_creates", Held: 2}}, // 2 creates in progress
			{"a", "a2", state.ReserveResult{Outcome: "ok"}},                    // re-reserve is idempotent
			{"a", "a4", state.ReserveResult{Outcome: "user_max", Held: 3}},     // still 3
		}
		for _, st := range steps {
			got, err := s.Reserve(ctx, req(st.user, st.sid))
			if err != nil || got != st.want {
				t.Fatalf("reserve %s/%s: got %+v %v want %+v", st.user, st.sid, got, err, st.want)
			}
		}
		// A create that failed gives its unit back; one that succeeded moves
		// from creating to active and still counts, but not as a create.
		if err := s.Unreserve(ctx, "b1", "b"); err != nil {
			t.Fatal(err)
		}
		_ = s.PutActive(ctx, userRec("b", "b2"), now)
		_ = s.PutActive(ctx, userRec("a", "a2"), now)
		if got, _ := s.Reserve(ctx, req("b", "b3")); got.Outcome != "ok" {
			t.Fatalf("after unreserve and create: %+v", got)
		}
		// a at its max with a warm sandbox evicts its own, never another's.
		_ = s.PutActive(ctx, userRec("c", "c1"), now)
		_, _ = s.Release(ctx, "c1", "c", "t-c1", now)
		_, _ = s.Release(ctx, "a1", "a", "t-a1", now.Add(time.Second))
		if got, _ := s.Reserve(ctx, req("a", "a4")); got != (state.ReserveResult{Outcome: "evict", Victim: "a1", Quota: true}) {
			t.Fatalf("at max with own warm: %+v", got)
		}
		_, _, _ = s.Claim(ctx, "a1", "")
		if got, _ := s.Reserve(ctx, req("a", "a4")); got.Outcome != "ok" {
			t.Fatalf("after evicting own warm (claimed, not yet forgotten): %+v", got)
		}
		if _, err := s.Forget(ctx, "a1", ""); err != nil {
			t.Fatal(err)
		}
		if n, _ := s.Client().ZCard(ctx, s.Keys().User("a")).Result(); n == 0 {
			t.Fatal("the user's quota set is empty")
		}
		if err := s.Client().ZScore(ctx, s.Keys().User("a"), "a1").Err(); err == nil {
			t.Fatal("forgotten sandbox still in its user's quota set")
		}
		// An adopted warm sandbox counts for its user.
		if wrote, _ := s.PutWarm(ctx, userRec("d", "d1"), now); !wrote {
			t.Fatal("put warm")
		}
		one := req("d", "d2")
		one.MaxPerUser = 1
		if got, _ := s.Reserve(ctx, one); got != (state.ReserveResult{Outcome: "evict", Victim: "d1", Quota: true}) {
			t.Fatalf("adopted warm sandbox not counted: %+v", got)
		}
		// Expired reservations stop counting.
		late := req("a", "a5")
		late.Now = now.Add(2 * time.Minute)
		late.Deadline = late.Now.Add(time.Minute)
		if got, _ := s.Reserve(ctx, late); got.Outcome != "ok" {
			t.Fatalf("expired reservations still counted: %+v", got)
		}
	})
}

// TestReserveFairShare: under a full hard cap, a user at its fair share is
// refused while others hold sandboxes, and a user under it evicts the warm
// sandbox of an over-share user before the LRU one of an under-share user.
func TestReserveFairShare(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(100_000)
		req := func(user, sid string) state.ReserveRequest {
			return state.ReserveRequest{SandboxID: sid, User: user, Max: 4, Hard: true, Now: now, Deadline: now.Add(time.Minute)}
		}
		// a holds 3 of 4 (one warm), b holds 1 (warm, released earlier).
		for _, r := range []state.Record{userRec("b", "b1"), userRec("a", "a1"), userRec("a", "a2"), userRec("a", "a3")} {
			_ = s.PutActive(ctx, r, now)
		}
		_, _ = s.Release(ctx, "b1", "b", "t-b1", now)
		_, _ = s.Release(ctx, "a3", "a", "t-a3", now.Add(time.Second))
		// 2 users: share 2. a (3) evicts its own warm, b (1) evicts a's, not its own older one.
		if got, _ := s.Reserve(ctx, req("a", "a4")); got != (state.ReserveResult{Outcome: "evict", Victim: "a3", Quota: true}) {
			t.Fatalf("over-share user with own warm: %+v", got)
		}
		if got, _ := s.Reserve(ctx, req("b", "b2")); got != (state.ReserveResult{Outcome: "evict", Victim: "a3"}) {
			t.Fatalf("under-share user: %+v", got)
		}
		_, _, _ = s.Claim(ctx, "a3", "")
		_, _ = s.Forget(ctx, "a3", "")
		if got, _ := s.Reserve(ctx, req("b", "b2")); got.Outcome != "ok" {
			t.Fatalf("under-share user after eviction: %+v", got)
		}
		// Full again, nothing of a warm: a is refused with its share, b waits.
		if got, _ := s.Reserve(ctx, req("a", "a4")); got != (state.ReserveResult{Outcome: "share", Held: 2}) {
			t.Fatalf("over-share user at a full cap: %+v", got)
		}
		// c, a third user (share 4/3 = 1), evicts b's warm: b is at its share.
		if got, _ := s.Reserve(ctx, req("c", "c1")); got != (state.ReserveResult{Outcome: "evict", Victim: "b1"}) {
			t.Fatalf("new user: %+v", got)
		}
		// One user alone keeps the old behaviour: full, not a share refusal.
		solo := NewStore(s.Client(), "sandgate:{solo}:")
		_ = solo.PutActive(ctx, userRec("a", "s1"), now)
		one := req("a", "s2")
		one.Max = 1
		if got, _ := solo.Reserve(ctx, one); got.Outcome != "full" {
			t.Fatalf("single user at a full hard cap: %+v", got)
		}
	})
}
