package pool

import (
	"errors"
	"testing"
)

// benchOwner owns one user's sandboxes.
type benchOwner string

func (o benchOwner) Owns(user, _ string) bool { return string(o) == user }

// A request by sandbox id (/sandboxes/{id}/v1/...) to a cached route is a
// map lookup, an ownership check and the touch mark: no allocation.
func TestCachedRouteByIDDoesNotAllocate(t *testing.T) {
	p, want := hotPool(t)
	allocs := testing.AllocsPerRun(1000, func() {
		r, o, err := p.Route(ctx, want.SandboxID, benchOwner("u"))
		if err != nil || r != want || o != OutcomeHit {
			t.Fatal("cache miss")
		}
		r.Begin()
		r.End()
	})
	if allocs != 0 {
		t.Errorf("cached route by id + touch allocates %.1f times", allocs)
	}
	if _, _, err := p.Route(ctx, want.SandboxID, benchOwner("someone-else")); !errors.Is(err, ErrNotFound) {
		t.Errorf("another user's cached sandbox: %v, want ErrNotFound", err)
	}
}

// BenchmarkRouteByIDCached is the cache lookup of a request by sandbox id,
// in parallel on every core as BenchmarkAcquireCached.
func BenchmarkRouteByIDCached(b *testing.B) {
	p, want := hotPool(b)
	if r, _, err := p.Route(ctx, want.SandboxID, benchOwner("u")); err != nil || r != want {
		b.Fatalf("route: %v %v", r, err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, _, _ := p.Route(ctx, want.SandboxID, benchOwner("u"))
			r.Begin()
			r.End()
		}
	})
}
