package statedb

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/state"
)

// TestCrashBetweenStepsIsRepaired stops every change that spans slots after
// each of its steps, as a replica dying there would, then runs the
// reconciler's repair of the sandbox's bucket and checks the state it
// leaves: the bucket follows the record (or forgets a sandbox without one),
// the user's count and the fleet's count are right, and nothing is left
// for a second repair.
func TestCrashBetweenStepsIsRepaired(t *testing.T) {
	t.Parallel()
	t0 := time.UnixMilli(1_000_000)
	warm := func(t *testing.T, s *Store) {
		mustPut(t, s, "a", t0)
		if ok, err := s.Release(context.Background(), "a", "u", "t-a", t0); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	active := func(t *testing.T, s *Store) { mustPut(t, s, "a", t0) }
	cases := []struct {
		op    string
		step  int
		setup func(*testing.T, *Store)
		do    func(context.Context, *Store) error
		// after the repair: a's state ("" = no record), active, warm and
		// pre-started counts, and how many sandboxes u holds.
		state                  state.State
		active, warmN, prewarm int64
		held                   int64
	}{
		{"put_active", 1, nil, func(ctx context.Context, s *Store) error { return s.PutActive(ctx, rec("a", "i1"), t0) },
			"", 0, 0, 0, 0},
		{"put_active", 2, nil, func(ctx context.Context, s *Store) error { return s.PutActive(ctx, rec("a", "i1"), t0) },
			state.StateActive, 1, 0, 0, 1},
		{"activate", 1, warm, func(ctx context.Context, s *Store) error {
			_, err := s.Activate(ctx, "a", "i1", t0)
			return err
		}, state.StateActive, 1, 0, 0, 1},
		{"release", 1, active, func(ctx context.Context, s *Store) error {
			_, err := s.Release(ctx, "a", "u", "t-a", t0)
			return err
		}, state.StateWarm, 0, 1, 0, 1},
		{"claim", 1, active, func(ctx context.Context, s *Store) error {
			_, _, err := s.Claim(ctx, "a", "")
			return err
		}, state.StateDestroying, 0, 0, 0, 0},
		{"claim_expired", 1, active, func(ctx context.Context, s *Store) error {
			_, _, err := s.ClaimExpired(ctx, "a", state.IndexActive, t0, t0)
			return err
		}, state.StateActive, 1, 0, 0, 1},
		{"forget", 1, active, func(ctx context.Context, s *Store) error {
			_, err := s.Forget(ctx, "a", "")
			return err
		}, "", 0, 0, 0, 1}, // the held member without a record: pruned by the user's next refusal (below)
		{"forget", 2, active, func(ctx context.Context, s *Store) error {
			_, err := s.Forget(ctx, "a", "")
			return err
		}, "", 0, 0, 0, 1},
		{"put_prewarm", 2, nil, func(ctx context.Context, s *Store) error {
			_, err := s.PutPrewarm(ctx, prewarmRec("a"), t0)
			return err
		}, state.StatePrewarm, 0, 0, 1, 0},
		{"take_prewarm", 1, func(t *testing.T, s *Store) { mustPutPrewarm(t, s, "a", t0) }, func(ctx context.Context, s *Store) error {
			_, _, err := s.TakePrewarm(ctx, "a", "b", "u", t0.Add(time.Minute))
			return err
		}, state.StatePrewarm, 0, 0, 1, 0},
		{"take_prewarm", 2, func(t *testing.T, s *Store) { mustPutPrewarm(t, s, "a", t0) }, func(ctx context.Context, s *Store) error {
			_, _, err := s.TakePrewarm(ctx, "a", "b", "u", t0.Add(time.Minute))
			return err
		}, "", 0, 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s after step %d", c.op, c.step), func(t *testing.T) {
			t.Parallel()
			servers(t, func(t *testing.T, s *Store) {
				ctx := context.Background()
				if c.setup != nil {
					c.setup(t, s)
				}
				crashed := false
				s.crash = func(op string, step int) error {
					if op == c.op && step == c.step {
						crashed = true
						return errCrash
					}
					return nil
				}
				if err := c.do(ctx, s); !errors.Is(err, errCrash) || !crashed {
					t.Fatalf("%s did not stop after step %d: %v", c.op, c.step, err)
				}
				s.crash = nil
				later := t0.Add(time.Hour) // past the grace of a registry entry without a record
				b := s.keys.Bucket("a")
				for pass := 0; pass < 2; pass++ {
					bad, err := s.Inconsistent(ctx, []int{b}, later, time.Minute)
					if err != nil {
						t.Fatal(err)
					}
					if pass == 1 && len(bad) > 0 {
						t.Fatalf("still inconsistent after the repair: %v", bad)
					}
					for _, sid := range bad {
						if _, err := s.Repair(ctx, sid, later); err != nil {
							t.Fatal(err)
						}
					}
					if err := s.SyncCounts(ctx, []int{b}); err != nil {
						t.Fatal(err)
					}
				}
				got, ok, _ := s.Get(ctx, "a")
				if !ok {
					got.State = ""
				}
				cnt, _ := s.Count(ctx)
				if got.State != c.state || cnt.Active != c.active || cnt.Warm != c.warmN || cnt.Prewarm != c.prewarm {
					t.Fatalf("after the repair: record %q, counts %+v; want %q, %d active, %d warm, %d pre-started",
						got.State, cnt, c.state, c.active, c.warmN, c.prewarm)
				}
				// A pre-started one is indexed with its fingerprint, any other without.
				if fps, _ := s.rdb.HGetAll(ctx, s.keys.PrewarmFP()).Result(); c.prewarm == 1 && fps["a"] != "fp" || c.prewarm == 0 && len(fps) != 0 {
					t.Fatalf("fingerprints after the repair: %v", fps)
				}
				if held, _ := s.rdb.ZCount(ctx, s.keys.User("u"), heldScore, "+inf").Result(); held != c.held {
					t.Fatalf("u holds %d, want %d", held, c.held)
				}
				// The fleet counts what the buckets hold: a cap of exactly that is full.
				creating, _ := s.rdb.ZCount(ctx, s.keys.Creating(), fmt.Sprint(later.UnixMilli()), "+inf").Result()
				total := int(cnt.Active + cnt.Warm + cnt.Prewarm + creating)
				res, err := s.Reserve(ctx, state.ReserveRequest{SandboxID: "probe", Max: total + 1, Hard: true, Now: later, Deadline: later.Add(time.Minute)})
				if err != nil || res.Outcome != "ok" {
					t.Fatalf("fleet over-counts: a cap of %d refused one more: %+v %v", total+1, res, err)
				}
				if res, _ := s.Reserve(ctx, state.ReserveRequest{SandboxID: "probe2", Max: total + 1, Hard: true, Now: later, Deadline: later.Add(time.Minute)}); res.Outcome == "ok" {
					t.Fatalf("fleet under-counts: a cap of %d took two more", total+1)
				}
				// A held member without a record never blocks its user: pruned at the refusal.
				if c.held > 0 && c.state == "" {
					res, err := s.Reserve(ctx, state.ReserveRequest{SandboxID: "c", User: "u", MaxPerUser: 1, Now: later, Deadline: later.Add(time.Minute)})
					if err != nil || res.Outcome != "ok" {
						t.Fatalf("a forgotten sandbox still counts for its user: %+v %v", res, err)
					}
				}
			})
		})
	}
}

// errCrash is what the crash hook returns: the replica "died" there.
var errCrash = errors.New("crashed between steps (test)")

func mustPut(t *testing.T, s *Store, sid string, at time.Time) {
	t.Helper()
	r := rec(sid, "i1")
	if err := s.PutActive(context.Background(), r, at); err != nil {
		t.Fatal(err)
	}
}

// TestDestroyGateSparesAReclaimedSandbox races a warm reclaim against the
// reaper and an eviction: the reclaim's Activate, which runs without the
// sandbox's lock, lands between ClaimExpired taking the sandbox out of the
// warm index and claiming its record. The record's state check in
// scriptRecClaim is then all that stops the destroy of a sandbox that was
// just handed out: the claim must refuse it and put it back in the active
// index.
func TestDestroyGateSparesAReclaimedSandbox(t *testing.T) {
	t.Parallel()
	t0 := time.UnixMilli(1_000_000)
	cutoffs := map[string]time.Time{
		"reaper":   t0,                        // released at t0, expired at a cutoff of t0
		"eviction": time.UnixMilli(1<<62 - 1), // eviction takes any warm sandbox
	}
	for name, cutoff := range cutoffs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			servers(t, func(t *testing.T, s *Store) {
				ctx := context.Background()
				mustPut(t, s, "a", t0)
				if ok, err := s.Release(ctx, "a", "u", "t-a", t0); !ok || err != nil {
					t.Fatal(ok, err)
				}
				reclaimed := false
				s.crash = func(op string, step int) error {
					if op != "claim_expired" || step != 1 {
						return nil
					}
					ok, err := s.Activate(ctx, "a", "i1", t0.Add(time.Second))
					if err != nil {
						return err
					}
					reclaimed = ok
					return nil
				}
				_, claimed, err := s.ClaimExpired(ctx, "a", state.IndexWarm, cutoff, t0.Add(time.Second))
				if err != nil {
					t.Fatal(err)
				}
				if !reclaimed {
					t.Fatal("the reclaim did not activate the warm sandbox")
				}
				if claimed {
					t.Fatal("the destroy gate claimed a sandbox a reclaim had just handed out")
				}
				got, ok, err := s.Get(ctx, "a")
				if err != nil || !ok || got.State != state.StateActive {
					t.Fatalf("after the race: record %+v (found %v, %v), want active", got, ok, err)
				}
				if cnt, err := s.Count(ctx); err != nil || cnt.Active != 1 || cnt.Warm != 0 {
					t.Fatalf("after the race: counts %+v (%v), want the sandbox in the active index", cnt, err)
				}
			})
		})
	}
}
