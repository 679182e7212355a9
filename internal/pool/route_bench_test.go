package pool

import (
	"errors"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/preview"
	"github.com/sandgate/sandgate/internal/state"
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

// hotLink is a preview link to port 3000 of want's incarnation, signed
// with the key p verifies with.
func hotLink(tb testing.TB, p *Pool, want *Route) string {
	tb.Helper()
	p.links.Keys.Replace(1, map[uint16]*preview.Key{1: preview.NewKey([]byte("0123456789abcdef0123456789abcdef"))})
	sid, _ := preview.ParseSandboxID(want.SandboxID)
	_, key, _ := p.links.Keys.Current()
	return key.Sign(preview.Link{KeyID: 1, SandboxID: sid, Port: 3000, Expires: uint32(time.Now().Add(time.Hour).Unix()),
		ID: [preview.IDLen]byte{1}}, want.Incarnation)
}

// A preview link to a cached route resolves, its port's decimal form
// included (what the router hands the proxy), with no Redis round trip (the
// pool's Redis is an address nothing listens on) and no allocation; the
// same link does not open another cached sandbox, nor the same sandbox
// recreated.
func TestPreviewRouteCachedDoesNotAllocate(t *testing.T) {
	p, want := hotPool(t)
	tok := hotLink(t, p, want)
	allocs := testing.AllocsPerRun(1000, func() {
		r, l, o, err := p.PreviewRoute(ctx, tok)
		if err != nil || r.Route != want || l.PortString() != "3000" || o != OutcomeHit {
			t.Fatalf("preview route: %v %v", r, err)
		}
	})
	if allocs != 0 {
		t.Errorf("cached preview route allocates %.1f times", allocs)
	}
	// bob's sandbox, cached too: alice's link with bob's id re-encoded
	// must not open it.
	bob, err := p.newRoute(state.Record{SandboxID: identity.SandboxID("bob", "hot"), User: "bob", Thread: "hot",
		Incarnation: want.Incarnation, URL: "http://127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	bob.expires.Store(1 << 62)
	l, mac, _ := preview.Parse(tok)
	l.SandboxID, _ = preview.ParseSandboxID(bob.SandboxID)
	if p.links.Keys.Verify(&l, mac, bob.Incarnation) {
		t.Fatal("alice's signature verifies for bob's sandbox")
	}
	// The recreated sandbox: a new incarnation under the same id.
	if _, err := p.newRoute(state.Record{SandboxID: want.SandboxID, User: "u", Thread: "hot", Incarnation: "i2",
		URL: "http://127.0.0.1:9"}); err != nil {
		t.Fatal(err)
	}
	p.cache.peek(want.SandboxID).expires.Store(1 << 62)
	if _, _, _, err := p.PreviewRoute(ctx, tok); !errors.Is(err, ErrNotFound) {
		t.Errorf("link of the old incarnation: %v, want ErrNotFound", err)
	}
}

// BenchmarkPreviewVerify is a preview request's whole link check on a
// cached route: parse, expiry, revocation, key, route look-up, HMAC, and
// the port's decimal form for the proxy.
func BenchmarkPreviewVerify(b *testing.B) {
	p, want := hotPool(b)
	tok := hotLink(b, p, want)
	b.ReportAllocs()
	for b.Loop() {
		_, l, _, err := p.PreviewRoute(ctx, tok)
		if err != nil || l.PortString() != "3000" {
			b.Fatal(err)
		}
	}
}
