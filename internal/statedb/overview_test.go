package statedb

import (
	"context"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/state"
)

// The overview holds each sandbox once, in its state, with the time its
// index keeps; a reservation past its deadline and a recorded create are
// not "creating", even before its commit (run after the answer) gives the
// reservation back.
func TestOverview(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(100_000)
		dl := now.Add(time.Minute)
		for _, sid := range []string{"a1", "a2", "w1", "c1", "c2", "old"} {
			u := "u"
			if sid == "c2" {
				u = "v"
			}
			deadline := dl
			if sid == "old" {
				deadline = now.Add(-time.Second)
			}
			if _, err := s.Reserve(ctx, state.ReserveRequest{SandboxID: sid, User: u, Now: now.Add(-time.Hour), Deadline: deadline}); err != nil {
				t.Fatal(err)
			}
		}
		_ = s.PutActive(ctx, rec("a1", "i"), now)
		_ = s.PutActive(ctx, rec("w1", "i"), now)
		_, _ = s.Release(ctx, "w1", "u", "t-w1", now.Add(time.Second))
		if _, err := s.RecordActive(ctx, rec("a2", "i"), now); err != nil { // commit not run
			t.Fatal(err)
		}

		ov, err := s.Overview(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		active := map[string]state.Entry{}
		for _, e := range ov.Active {
			active[e.SandboxID] = e
		}
		if a1 := active["a1"]; len(ov.Active) != 2 || a1.Thread != "t-a1" || !a1.Since.Equal(now) || active["a2"].Thread != "t-a2" {
			t.Errorf("active = %+v, want a1 and a2", ov.Active)
		}
		if len(ov.Warm) != 1 || ov.Warm[0].SandboxID != "w1" || !ov.Warm[0].Since.Equal(now.Add(time.Second)) {
			t.Errorf("warm = %+v", ov.Warm)
		}
		got := map[string]string{}
		for _, e := range ov.Creating {
			got[e.SandboxID] = e.User
		}
		if len(got) != 2 || got["c1"] != "u" || got["c2"] != "v" {
			t.Errorf("creating = %+v, want c1 (u) and c2 (v) only", ov.Creating)
		}
	})
}

// Replicas are listed newest beat first; one silent past replicaKeep is
// dropped by the next beat of any replica.
func TestBeatAndReplicas(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.UnixMilli(10_000_000)
		steps := []struct {
			instance string
			at       time.Time
		}{{"gone", now.Add(-replicaKeep - time.Second)}, {"a", now.Add(-time.Second)}, {"b", now}, {"a", now.Add(-500 * time.Millisecond)}}
		for _, st := range steps {
			if err := s.Beat(ctx, st.instance, st.at); err != nil {
				t.Fatal(err)
			}
		}
		reps, err := s.Replicas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(reps) != 2 || reps[0].Instance != "b" || reps[1].Instance != "a" || !reps[1].Seen.Equal(now.Add(-500*time.Millisecond)) {
			t.Fatalf("replicas = %+v, want b then a (its latest beat), gone dropped", reps)
		}
	})
}
