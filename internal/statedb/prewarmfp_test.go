package statedb

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/testutil"
)

// putFP indexes a pre-started sandbox of fingerprint fp created at at.
func putFP(t *testing.T, s *Store, sid, fp string, at time.Time) {
	t.Helper()
	r := prewarmRec(sid)
	r.Prewarm, r.CreatedAt = fp, at
	if wrote, err := s.PutPrewarm(context.Background(), r, at); err != nil || !wrote {
		t.Fatalf("PutPrewarm %s = %v %v", sid, wrote, err)
	}
}

// putLegacy indexes sid as an earlier version did: its record names fp,
// the fleet's pre-started index has it without a fingerprint.
func putLegacy(t *testing.T, s *Store, sid, fp string, at time.Time) {
	t.Helper()
	putFP(t, s, sid, fp, at)
	if err := s.rdb.HDel(context.Background(), s.keys.PrewarmFP(), sid).Err(); err != nil {
		t.Fatal(err)
	}
}

func wantCounts(t *testing.T, what string, get func(context.Context) (map[string]int64, error), want map[string]int64) {
	t.Helper()
	got, err := get(context.Background())
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("%s = %v %v, want %v", what, got, err, want)
	}
}

// TestTakeByFingerprint: a take naming a fingerprint is offered the oldest
// pre-started sandbox of it, never an older one of another fingerprint nor
// one an earlier version indexed without one; a take naming none gets the
// oldest of any; a full fleet evicts the oldest of any; each successful
// take counts once for its fingerprint.
func TestTakeByFingerprint(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(100_000)
		at := func(sec int) time.Time { return now.Add(time.Duration(sec) * time.Second) }
		putLegacy(t, s, "old", "A", at(0))
		putFP(t, s, "b1", "B", at(1))
		putFP(t, s, "a1", "A", at(2))
		putFP(t, s, "b2", "B", at(3))
		putFP(t, s, "a2", "A", at(4))
		wantCounts(t, "PrewarmCounts", s.PrewarmCounts, map[string]int64{"A": 2, "B": 2, "": 1})
		wantCounts(t, "PrewarmClaims", s.PrewarmClaims, map[string]int64{})

		req := func(kind, fp string, max int) state.ReserveRequest {
			return state.ReserveRequest{SandboxID: "t", Max: max, Hard: true, Kind: kind, Prewarm: fp, Now: now, Deadline: now.Add(time.Minute)}
		}
		spread := func(r state.ReserveRequest, n uint32) state.ReserveRequest { r.Spread = n; return r }
		for _, c := range []struct {
			name string
			req  state.ReserveRequest
			want state.ReserveResult
		}{
			{"A skips older B and the unfingerprinted", req(state.KindTake, "A", 0), state.ReserveResult{Outcome: "prewarm", Victim: "a1"}},
			{"B gets its oldest", req(state.KindTake, "B", 0), state.ReserveResult{Outcome: "prewarm", Victim: "b1"}},
			{"A at a full cap", req(state.KindTake, "A", 5), state.ReserveResult{Outcome: "prewarm", Victim: "a1"}},
			{"none named: the oldest of any", req(state.KindTake, "", 0), state.ReserveResult{Outcome: "prewarm", Victim: "old"}},
			{"unknown fingerprint, free room: reserved", req(state.KindTake, "C", 0), state.ReserveResult{Outcome: "ok"}},
			{"unknown fingerprint, full: evicts the oldest of any", req(state.KindTake, "C", 5), state.ReserveResult{Outcome: "evict", Victim: "old"}},
			{"a plain create, full: evicts the oldest of any", req("", "A", 5), state.ReserveResult{Outcome: "evict", Victim: "old"}},
			// A retry's spread picks among those of its fingerprint.
			{"A spread 1: the second of A", spread(req(state.KindTake, "A", 0), 1), state.ReserveResult{Outcome: "prewarm", Victim: "a2"}},
			{"A spread 4: the first of A again", spread(req(state.KindTake, "A", 0), 4), state.ReserveResult{Outcome: "prewarm", Victim: "a1"}},
			{"none named, spread 3: the fourth of any", spread(req(state.KindTake, "", 0), 3), state.ReserveResult{Outcome: "prewarm", Victim: "b2"}},
		} {
			_ = s.Unreserve(ctx, "t", "")
			if got, err := s.Reserve(ctx, c.req); err != nil || got != c.want {
				t.Fatalf("%s: got %+v %v, want %+v", c.name, got, err, c.want)
			}
		}
		_ = s.Unreserve(ctx, "t", "")

		// Eight replicas race for a1: one wins, A counts once.
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		for _, sid := range []string{"t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, ok, err := s.TakePrewarm(ctx, "a1", sid, "u", now.Add(time.Minute))
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					wins++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("%d takes of a1 won", wins)
		}
		wantCounts(t, "PrewarmClaims after a1", s.PrewarmClaims, map[string]int64{"A": 1})
		if got, _ := s.Reserve(ctx, req(state.KindTake, "A", 0)); got != (state.ReserveResult{Outcome: "prewarm", Victim: "a2"}) {
			t.Fatalf("A after a1 was taken: %+v", got)
		}
		for _, pw := range []string{"b1", "old"} {
			if _, ok, err := s.TakePrewarm(ctx, pw, "x-"+pw, "u", now.Add(time.Minute)); !ok || err != nil {
				t.Fatalf("take %s: %v %v", pw, ok, err)
			}
		}
		// The unfingerprinted one counts for no fingerprint.
		wantCounts(t, "PrewarmClaims", s.PrewarmClaims, map[string]int64{"A": 1, "B": 1})
		wantCounts(t, "PrewarmCounts", s.PrewarmCounts, map[string]int64{"A": 1, "B": 1})

		// Eviction and forgetting drop the fingerprint with the entry.
		if _, ok, _ := s.ClaimExpired(ctx, "b2", state.IndexPrewarm, time.Unix(1<<40, 0), now); !ok {
			t.Fatal("claim of b2 for eviction")
		}
		if _, err := s.Forget(ctx, "b2", ""); err != nil {
			t.Fatal(err)
		}
		wantCounts(t, "PrewarmCounts after evicting b2", s.PrewarmCounts, map[string]int64{"A": 1})
		if fps, _ := s.rdb.HGetAll(ctx, s.keys.PrewarmFP()).Result(); !maps.Equal(fps, map[string]string{"a2": "A"}) {
			t.Fatalf("fingerprints left: %v", fps)
		}
		wantCounts(t, "PrewarmClaims after evicting b2", s.PrewarmClaims, map[string]int64{"A": 1, "B": 1})
	})
}

// TestRepairRestoresFingerprint: the reconciler finds a pre-started entry
// without its record's fingerprint (an earlier version's, or one whose
// index entry was lost) and indexes it with it, after which a take of that
// fingerprint is offered it.
func TestRepairRestoresFingerprint(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(100_000)
		putLegacy(t, s, "old", "A", now)
		putFP(t, s, "lost", "B", now.Add(time.Second))
		if err := s.rdb.ZRem(ctx, s.keys.Prewarm(), "lost").Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.rdb.HDel(ctx, s.keys.PrewarmFP(), "lost").Err(); err != nil {
			t.Fatal(err)
		}
		take := state.ReserveRequest{SandboxID: "t", Kind: state.KindTake, Prewarm: "A", Now: now, Deadline: now.Add(time.Minute)}
		if got, _ := s.Reserve(ctx, take); got.Outcome != "ok" {
			t.Fatalf("an unfingerprinted entry was offered: %+v", got)
		}
		_ = s.Unreserve(ctx, "t", "")
		buckets := []int{s.keys.Bucket("old"), s.keys.Bucket("lost")}
		bad, err := s.Inconsistent(ctx, buckets, now, time.Minute)
		if err != nil || len(bad) != 2 {
			t.Fatalf("Inconsistent = %v %v, want old and lost", bad, err)
		}
		for _, sid := range bad {
			if _, err := s.Repair(ctx, sid, now); err != nil {
				t.Fatal(err)
			}
		}
		if fps, _ := s.rdb.HGetAll(ctx, s.keys.PrewarmFP()).Result(); !maps.Equal(fps, map[string]string{"old": "A", "lost": "B"}) {
			t.Fatalf("fingerprints after the repair: %v", fps)
		}
		if bad, _ := s.Inconsistent(ctx, buckets, now, time.Minute); len(bad) != 0 {
			t.Fatalf("still inconsistent: %v", bad)
		}
		if got, _ := s.Reserve(ctx, take); got != (state.ReserveResult{Outcome: "prewarm", Victim: "old"}) {
			t.Fatalf("A after the repair: %+v", got)
		}
		take.Prewarm = "B"
		if got, _ := s.Reserve(ctx, take); got != (state.ReserveResult{Outcome: "prewarm", Victim: "lost"}) {
			t.Fatalf("B after the repair: %+v", got)
		}
	})
}

// TestPrewarmFingerprintsOnCluster runs the fleet's scripts that touch the
// new keys on a 3-master Redis Cluster: every key they name must be in the
// {fleet} slot, or the cluster refuses them (CROSSSLOT).
func TestPrewarmFingerprintsOnCluster(t *testing.T) {
	t.Parallel()
	c := testutil.StartRedisCluster(t, 3)
	rdb, err := Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	s := NewStore(rdb, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.UnixMilli(100_000)
	putFP(t, s, "b1", "B", now)
	putFP(t, s, "a1", "A", now.Add(time.Second))
	wantCounts(t, "PrewarmCounts", s.PrewarmCounts, map[string]int64{"A": 1, "B": 1})
	got, err := s.Reserve(ctx, state.ReserveRequest{SandboxID: "t", Kind: state.KindTake, Prewarm: "A", Now: now, Deadline: now.Add(time.Minute)})
	if err != nil || got != (state.ReserveResult{Outcome: "prewarm", Victim: "a1"}) {
		t.Fatalf("take A: %+v %v", got, err)
	}
	if _, ok, err := s.TakePrewarm(ctx, "a1", "t", "u", now.Add(time.Minute)); !ok || err != nil {
		t.Fatalf("TakePrewarm: %v %v", ok, err)
	}
	wantCounts(t, "PrewarmClaims", s.PrewarmClaims, map[string]int64{"A": 1})
	if _, err := s.Repair(ctx, "b1", now); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, "PrewarmCounts after the take", s.PrewarmCounts, map[string]int64{"B": 1})
}
