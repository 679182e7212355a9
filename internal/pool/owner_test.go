package pool

import (
	"errors"
	"testing"

	"github.com/sandgate/sandgate/internal/state"
)

// owner owns one user's sandboxes.
type owner string

func (o owner) Owns(user, _ string) bool { return string(o) == user }

func TestRouteByIDOnlyForItsOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxSandboxes: -1})
	p, other := e.replica(), e.replica()
	r, _, err := p.Acquire(ctx, "alice", "t")
	if err != nil {
		t.Fatal(err)
	}
	// Cached on p: the owner gets it, anyone else gets "not found".
	if got, _, err := p.Route(ctx, r.SandboxID, owner("alice")); err != nil || got != r {
		t.Fatalf("owner, cached: %v %v", got, err)
	}
	if _, _, err := p.Route(ctx, r.SandboxID, owner("bob")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("other user, cached: %v", err)
	}
	// Warm in Redis, not cached on the other replica: a stranger's lookup
	// must not reclaim it.
	if err := p.Release(ctx, "alice", "t"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.Route(ctx, r.SandboxID, owner("bob")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("other user, from Redis: %v", err)
	}
	if rec, ok, _ := other.Record(ctx, r.SandboxID); !ok || rec.State != state.StateWarm {
		t.Fatalf("a stranger's lookup changed the record: %+v", rec)
	}
	if _, o, err := other.Route(ctx, r.SandboxID, owner("alice")); err != nil || o != OutcomeWarm {
		t.Fatalf("owner, from Redis: %v %v", o, err)
	}
}
