package pool

import (
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/statedb"
)

// TestFleetsOnOneBackend: two fleets (own Redis) share one backend. Each
// labels its sandboxes; neither's reconciler adopts nor prune removes the
// other's, nor an unlabelled sandbox; prune removes only its own fleet's
// unrecorded sandboxes past the grace, and a dry run removes nothing.
func TestFleetsOnOneBackend(t *testing.T) {
	t.Parallel()
	alphaEnv := newEnv(t, Config{MaxSandboxes: -1, ReconcileGrace: time.Minute, Fleet: "alpha"})
	alpha := alphaEnv.replica()
	betaEnv := newEnv(t, Config{MaxSandboxes: -1, ReconcileGrace: time.Minute, Fleet: "beta"})
	betaEnv.be, betaEnv.clock = alphaEnv.be, alphaEnv.clock // one engine
	beta := betaEnv.replica()

	mine, _, err := alpha.Acquire(ctx, "u", "mine")
	if err != nil {
		t.Fatal(err)
	}
	theirs, _, err := beta.Acquire(ctx, "u", "theirs")
	if err != nil {
		t.Fatal(err)
	}
	alpha.Wait()
	beta.Wait()
	if l := alphaEnv.be.live[theirs.SandboxID].Labels[backend.LabelFleet]; l != "beta" {
		t.Fatalf("beta's sandbox labelled fleet %q", l)
	}
	// A sandbox alpha lost the record of, and one nobody labelled.
	if err := alphaEnv.rdb().Del(ctx, statedb.NewKeys("", 0).Sandbox(mine.SandboxID)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := alphaEnv.rdb().ZRem(ctx, statedb.NewKeys("", 0).Active(statedb.NewKeys("", 0).Bucket(mine.SandboxID)), mine.SandboxID).Err(); err != nil {
		t.Fatal(err)
	}
	old := identity.SandboxID("u", "old")
	alphaEnv.be.mu.Lock()
	alphaEnv.be.live[old] = backend.Info{SandboxID: old, User: "u", Thread: "old", URL: alphaEnv.be.url, Incarnation: "inc-old",
		Labels: map[string]string{backend.LabelSandboxID: old}, CreatedAt: alphaEnv.clock.Now()}
	alphaEnv.be.mu.Unlock()
	alphaEnv.clock.Advance(2 * time.Minute)

	rep, err := NewAdmin(alpha).Prune(ctx, true)
	if err != nil || rep.Fleet != "alpha" || !rep.DryRun || len(rep.Items) != 1 || rep.Items[0].SandboxID != mine.SandboxID {
		t.Fatalf("dry run: %+v %v", rep, err)
	}
	if alphaEnv.be.liveCount() != 3 {
		t.Fatal("a dry run removed something")
	}
	rep, err = NewAdmin(alpha).Prune(ctx, false)
	if err != nil || len(rep.Items) != 1 || rep.Items[0].Error != "" {
		t.Fatalf("prune: %+v %v", rep, err)
	}
	if _, ok := alphaEnv.be.live[mine.SandboxID]; ok {
		t.Fatal("alpha's unrecorded sandbox survived prune")
	}
	// The reconciler adopts the unlabelled one (as before the label), never beta's.
	r, err := NewReconciler(alpha).Pass(ctx)
	if err != nil || r.Adopted != 1 {
		t.Fatalf("reconcile: %+v %v", r, err)
	}
	if _, ok, _ := alpha.Record(ctx, theirs.SandboxID); ok {
		t.Fatal("alpha adopted beta's sandbox")
	}
	if _, ok := alphaEnv.be.live[theirs.SandboxID]; !ok {
		t.Fatal("beta's sandbox was removed")
	}
}

func TestFleetValidated(t *testing.T) {
	t.Parallel()
	for fleet, ok := range map[string]bool{"": true, "prod-eu.1": true, "a": true, "-x": false, "a b": false, "x:y": false,
		string(make([]byte, 64)): false} {
		err := Config{Fleet: fleet, Mounts: backend.MountConfig{DataDir: "/d"}}.Validate()
		if (err == nil) != ok {
			t.Errorf("fleet %q: %v", fleet, err)
		}
	}
}
