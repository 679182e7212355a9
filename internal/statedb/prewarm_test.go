package statedb

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/state"

	"github.com/sandgate/sandgate/internal/backend"
)

func prewarmRec(sid string) state.Record {
	return state.Record{SandboxID: sid, Backend: "process", Incarnation: "inc-" + sid, URL: "http://127.0.0.1:1",
		CreatedAt: time.UnixMilli(1000), Secret: "s-" + sid, Prewarm: "fp"}
}

// TestReservePrewarmKinds pins how the prewarm pool takes part in capacity:
// it counts, the refill only fills free room, a claim is offered the oldest
// pre-started sandbox even at a full cap (unless it has an egress policy of
// its own), and a plain create evicts a pre-started sandbox before any
// warm one.
func TestReservePrewarmKinds(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(100_000)
		req := func(kind, user, sid string) state.ReserveRequest {
			return state.ReserveRequest{SandboxID: sid, User: user, Max: 3, Hard: true, Kind: kind, Now: now, Deadline: now.Add(time.Minute)}
		}
		steps := []struct {
			name string
			do   func()
			req  state.ReserveRequest
			want state.ReserveResult
		}{
			{"refill into free room", nil, req(state.KindPrewarm, "", "p1"), state.ReserveResult{Outcome: "ok"}},
			{"refill is recorded", func() { mustPutPrewarm(t, s, "p1", now) }, req(state.KindPrewarm, "", "p2"), state.ReserveResult{Outcome: "ok"}},
			{"second recorded", func() { mustPutPrewarm(t, s, "p2", now.Add(time.Second)) }, req("", "u", "a1"), state.ReserveResult{Outcome: "ok"}},
			{"full: the refill never evicts", func() { _ = s.PutActive(ctx, userRec("u", "a1"), now) }, req(state.KindPrewarm, "", "p3"), state.ReserveResult{Outcome: "full"}},
			{"full: a take gets the oldest", nil, req(state.KindTake, "v", "b1"), state.ReserveResult{Outcome: "prewarm", Victim: "p1"}},
			{"a thread with an egress policy of its own is never offered one", func() {
				if _, err := s.SetEgress(ctx, "e1", backend.Egress{Mode: backend.EgressNone}); err != nil {
					t.Fatal(err)
				}
			}, req(state.KindTake, "e", "e1"), state.ReserveResult{Outcome: "evict", Victim: "p1"}},
			{"full: a create evicts a pre-started one first", func() {
				_ = s.PutActive(ctx, userRec("w", "w1"), now)
				_, _ = s.Release(ctx, "w1", "w", "t-w1", now)
			}, req("", "x", "c1"), state.ReserveResult{Outcome: "evict", Victim: "p1"}},
		}
		for _, st := range steps {
			if st.do != nil {
				st.do()
			}
			got, err := s.Reserve(ctx, st.req)
			if err != nil || got != st.want {
				t.Fatalf("%s: got %+v %v, want %+v", st.name, got, err, st.want)
			}
		}
		if c, _ := s.Count(ctx); c.Prewarm != 2 {
			t.Fatalf("prewarm count %d, want 2", c.Prewarm)
		}
		// Taking moves the unit: the record goes, the binder's reservation
		// and ownership appear, in one step.
		got, ok, err := s.TakePrewarm(ctx, "p1", "b1", "v", now.Add(time.Minute))
		if err != nil || !ok || got.Secret != "s-p1" || got.Incarnation != "inc-p1" || got.Prewarm != "fp" {
			t.Fatalf("TakePrewarm = %+v %v %v", got, ok, err)
		}
		if _, ok, _ := s.Get(ctx, "p1"); ok {
			t.Fatal("a taken pre-started sandbox keeps its record")
		}
		if sc, _ := s.Client().ZScore(ctx, s.Keys().Creating(), "b1").Result(); sc == 0 {
			t.Fatal("the binder holds no reservation")
		}
		if u, _ := s.Client().HGet(ctx, s.Keys().fleetKeys()[2], "b1").Result(); u != "v" {
			t.Fatalf("owner of the claim = %q", u)
		}
		if _, ok, _ := s.TakePrewarm(ctx, "p1", "b2", "v", now); ok {
			t.Fatal("a pre-started sandbox was taken twice")
		}
		if c, _ := s.Count(ctx); c.Prewarm != 1 || c.Creating != 1 {
			t.Fatalf("after the take: %+v", c)
		}
		// Eviction and forgetting leave the index.
		if _, ok, _ := s.ClaimExpired(ctx, "p2", state.IndexPrewarm, time.Unix(1<<40, 0), now); !ok {
			t.Fatal("claim of a pre-started sandbox for eviction")
		}
		if _, err := s.Forget(ctx, "p2", ""); err != nil {
			t.Fatal(err)
		}
		if c, _ := s.Count(ctx); c.Prewarm != 0 {
			t.Fatalf("after eviction: %+v", c)
		}
	})
}

func mustPutPrewarm(t *testing.T, s *Store, sid string, now time.Time) {
	t.Helper()
	if wrote, err := s.PutPrewarm(context.Background(), prewarmRec(sid), now); err != nil || !wrote {
		t.Fatalf("PutPrewarm %s = %v %v", sid, wrote, err)
	}
	if wrote, _ := s.PutPrewarm(context.Background(), prewarmRec(sid), now); wrote {
		t.Fatalf("PutPrewarm %s wrote over a record", sid)
	}
}

// TestTakePrewarmRace: of many claimers racing for one pre-started sandbox,
// exactly one gets it.
func TestTakePrewarmRace(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		now := time.UnixMilli(100_000)
		mustPutPrewarm(t, s, "p1", now)
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			won []string
		)
		for _, sid := range []string{"t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, ok, err := s.TakePrewarm(context.Background(), "p1", sid, "u", now.Add(time.Minute)); err == nil && ok {
					mu.Lock()
					won = append(won, sid)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("winners %v, want exactly one", won)
		}
	})
}
