package pool

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/identity"
)

// TestPreviewLinksAcrossReplicas: on real Redis, a link made on one
// replica opens its sandbox on another (a Redis read on a cold cache,
// reclaiming it from the warm pool), never provisions: once the sandbox is
// dead the re-check is ErrNotFound, a recreated sandbox does not honour it,
// and a revocation reaches the other replica's watcher within a second.
func TestPreviewLinksAcrossReplicas(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p, other := e.replica(), e.replica()
	wctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	for _, r := range []*Pool{p, other} {
		go NewPreviewWatcher(r).Run(wctx)
	}
	sid := identity.SandboxID("u", "pv")
	r, _, err := p.Acquire(ctx, "u", "pv")
	if err != nil {
		t.Fatal(err)
	}
	var tok string
	deadline := time.Now().Add(5 * time.Second)
	for tok == "" { // the watcher loads the keys
		if tok, _, err = p.CreatePreview(ctx, r.Identity(), 3000, time.Hour); errors.Is(err, ErrPreviewKeys) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for {
		pr, l, _, err := other.PreviewRoute(ctx, tok)
		if err == nil {
			if pr.Incarnation != r.Incarnation || l.Port != 3000 {
				t.Fatalf("link on another replica: %s port %d", pr.Incarnation, l.Port)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("link on another replica: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Release(ctx, "u", "pv"); err != nil {
		t.Fatal(err)
	}
	other.cache.drop(sid, nil)
	pr, _, o, err := other.PreviewRoute(ctx, tok)
	if err != nil || o != OutcomeWarm {
		t.Fatalf("link to a warm sandbox: %v %v, want a reclaim", o, err)
	}

	// Killed behind the gateway's back: the re-check finds it dead, and
	// nothing is created for the link.
	e.be.kill(sid)
	if _, err := other.RecheckPreview(ctx, pr); !errors.Is(err, ErrNotFound) {
		t.Fatalf("re-check of a dead sandbox: %v", err)
	}
	if _, _, _, err := p.PreviewRoute(ctx, tok); !errors.Is(err, ErrNotFound) {
		t.Fatalf("link to a dead sandbox: %v", err)
	}
	if n := e.be.count(e.be.creates, sid); n != 1 {
		t.Fatalf("%d creates: a link provisioned", n)
	}

	// The thread's next sandbox is a new incarnation: the old link is dead.
	r, _, err = p.Acquire(ctx, "u", "pv")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := other.PreviewRoute(ctx, tok); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old link to the recreated sandbox: %v", err)
	}

	// Revoked on p: the other replica refuses it within a second.
	tok, rec, err := p.CreatePreview(ctx, r.Identity(), 3000, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := other.PreviewRoute(ctx, tok); err != nil {
		t.Fatalf("new link: %v", err)
	}
	if err := p.RevokePreview(ctx, sid, rec.ID); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for {
		if _, _, _, err := other.PreviewRoute(ctx, tok); errors.Is(err, ErrNotFound) {
			break
		}
		if time.Since(began) > time.Second {
			t.Fatal("revoked link still open on the other replica after 1s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := p.RevokePreview(ctx, sid, rec.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second revoke: %v, want ErrNotFound", err)
	}
	if list, err := p.Previews(ctx, r.Identity()); err != nil || len(list) != 0 {
		t.Errorf("list after the revoke: %v %v, want none", list, err)
	}
}
