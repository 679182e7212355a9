package pool

import (
	"errors"
	"testing"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/state"
)

// TestCachedCapabilityRouteDoesNotAllocate: a cached capability costs one
// SHA-256 and a map read, and its caller header value is the entry's;
// this pool's Redis is unreachable, so any round trip would fail the call.
func TestCachedCapabilityRouteDoesNotAllocate(t *testing.T) {
	p, r := hotPool(t)
	const capability = "Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eHF1dXg"
	want := p.cache.putCapability(state.SumCapability(capability), r)
	allocs := testing.AllocsPerRun(1000, func() {
		cr, o, err := p.CapabilityRoute(ctx, capability)
		if err != nil || cr != want || o != OutcomeHit {
			t.Fatalf("cache miss: %v", err)
		}
		if c := cr.Caller(); len(c) != 1 || c[0] != sandboxspec.CallerCapability+":"+r.User {
			t.Fatalf("caller %q", c)
		}
		cr.Begin()
		cr.End()
	})
	if allocs != 0 {
		t.Errorf("cached capability route + touch allocates %.1f times", allocs)
	}
	// The entry goes with its route: a destroy on this replica ends it at once.
	p.cache.drop(r.SandboxID, nil)
	if _, _, err := p.CapabilityRoute(ctx, capability); !errors.Is(err, ErrState) {
		t.Fatalf("after the route was dropped: %v, want a Redis look-up (unreachable here)", err)
	}
}

// TestCapabilityNeverProvisions: a capability reaches its incarnation
// (reclaiming it from the warm pool), and once that incarnation is dead or
// destroyed it is ErrNotFound, with no create.
func TestCapabilityNeverProvisions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := e.replica()
	sid := identity.SandboxID("u", "cap")
	r, _, err := p.Acquire(ctx, "u", "cap")
	if err != nil {
		t.Fatal(err)
	}
	capability, err := p.Capability(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	other := e.replica() // no cached route: Redis look-up
	if cr, o, err := other.CapabilityRoute(ctx, capability); err != nil || cr.Incarnation != r.Incarnation || o != OutcomeHit {
		t.Fatalf("capability on another replica: %v %v", o, err)
	}
	if err := p.Release(ctx, "u", "cap"); err != nil {
		t.Fatal(err)
	}
	other.cache.drop(sid, nil)
	if _, o, err := other.CapabilityRoute(ctx, capability); err != nil || o != OutcomeWarm {
		t.Fatalf("capability of a warm sandbox: %v %v, want a reclaim", o, err)
	}

	// Killed behind the gateway's back: the dial fails, the re-check finds it dead.
	cr, _, _ := other.CapabilityRoute(ctx, capability)
	e.be.kill(sid)
	if _, err := other.RecheckCapability(ctx, cr); !errors.Is(err, ErrNotFound) {
		t.Fatalf("re-check of a dead sandbox: %v", err)
	}
	if _, _, err := p.CapabilityRoute(ctx, capability); !errors.Is(err, ErrNotFound) {
		t.Fatalf("capability of a dead sandbox on the first replica: %v", err)
	}
	if n := e.be.count(e.be.creates, sid); n != 1 {
		t.Fatalf("%d creates: a capability provisioned", n)
	}

	// A new incarnation has a new capability; destroying it ends that one.
	r, _, err = p.Acquire(ctx, "u", "cap")
	if err != nil {
		t.Fatal(err)
	}
	next, _ := p.Capability(ctx, sid)
	if next == capability {
		t.Fatal("new incarnation, same capability")
	}
	if _, _, err := p.CapabilityRoute(ctx, next); err != nil {
		t.Fatal(err)
	}
	if err := p.Destroy(ctx, sid, ReasonClient); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.CapabilityRoute(ctx, next); !errors.Is(err, ErrNotFound) {
		t.Fatalf("capability of a destroyed sandbox: %v", err)
	}
}
