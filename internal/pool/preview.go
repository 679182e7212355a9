package pool

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/preview"
	"github.com/sandgate/sandgate/internal/state"
)

// Preview links (internal/preview): the pool signs them for a sandbox's
// current incarnation, lists and revokes them in Redis, and resolves them
// on the request path from this replica's copies of the fleet keys and
// revoked ids (kept current by the PreviewWatcher) and its route cache.

// Preview link limits.
const (
	// DefaultPreviewMaxTTL is the longest a link may live when
	// preview_max_ttl is 0; it is also how long a rotated-out key keeps
	// verifying.
	DefaultPreviewMaxTTL = 24 * time.Hour
	// DefaultPreviewTTL is a link's life when the request names none.
	DefaultPreviewTTL = time.Hour
)

// ErrPreviewKeys: the fleet keys are not loaded yet (Redis was not
// reachable since this replica started).
var ErrPreviewKeys = errors.New("preview links are not available yet: the fleet keys are not loaded")

// PreviewRoute is a route reached through a preview link: its own type so
// that a dial failure re-resolves the same incarnation (RecheckPreview),
// never provisions. Each Route holds its own, so handing it out does not
// allocate.
type PreviewRoute struct {
	*Route
}

// CreatePreview signs a link to port of the incarnation id names, for
// ttl (0 = DefaultPreviewTTL; at most preview_max_ttl), and lists it.
// ErrNotFound when the sandbox was replaced or destroyed meanwhile.
func (p *Pool) CreatePreview(ctx context.Context, id Identity, port int, ttl time.Duration) (string, state.Preview, error) {
	if ttl == 0 {
		ttl = DefaultPreviewTTL
	}
	if ttl < time.Second || ttl > p.cfg.PreviewMaxTTL {
		return "", state.Preview{}, fmt.Errorf("%w: ttl must be between 1s and %s", ErrBadPreview, p.cfg.PreviewMaxTTL)
	}
	if port < 1 || port > 65535 {
		return "", state.Preview{}, fmt.Errorf("%w: port must be 1-65535", ErrBadPreview)
	}
	keyID, key, ok := p.links.Keys.Current()
	if !ok {
		return "", state.Preview{}, ErrPreviewKeys
	}
	sid, ok := preview.ParseSandboxID(id.SandboxID)
	if !ok {
		return "", state.Preview{}, ErrNotFound
	}
	now := p.clock.Now()
	// Whole seconds, rounded up: a link lives at least its ttl.
	expires := now.Add(ttl + time.Second - 1).Truncate(time.Second)
	l := preview.Link{KeyID: keyID, SandboxID: sid, Port: uint16(port), Expires: uint32(expires.Unix())}
	if _, err := rand.Read(l.ID[:]); err != nil {
		return "", state.Preview{}, fmt.Errorf("preview id: %w", err)
	}
	rec := state.Preview{ID: l.IDString(), Port: port, Expires: expires, KeyID: keyID, Incarnation: id.Incarnation}
	listed, err := p.store.AddPreview(ctx, id.SandboxID, rec, now)
	if err != nil {
		return "", state.Preview{}, fmt.Errorf("%w: %w", ErrState, err)
	}
	if !listed {
		return "", state.Preview{}, ErrNotFound
	}
	return key.Sign(l, id.Incarnation), rec, nil
}

// ListedPreview is a live link with its token, for its owner.
type ListedPreview struct {
	state.Preview
	Token string
}

// Previews lists the live links of the incarnation id names, re-signed
// (no token is stored); links whose key was retired are left out.
func (p *Pool) Previews(ctx context.Context, id Identity) ([]ListedPreview, error) {
	all, err := p.store.Previews(ctx, id.SandboxID)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	sid, _ := preview.ParseSandboxID(id.SandboxID)
	now := p.clock.Now()
	out := make([]ListedPreview, 0, len(all))
	for _, rec := range all {
		lid, ok := preview.ParseID(rec.ID)
		if !ok || rec.Incarnation != id.Incarnation || !rec.Expires.After(now) || p.links.Revoked.Has(lid) {
			continue
		}
		key := p.links.Keys.Key(rec.KeyID)
		if key == nil {
			continue
		}
		l := preview.Link{KeyID: rec.KeyID, SandboxID: sid, Port: uint16(rec.Port), Expires: uint32(rec.Expires.Unix()), ID: lid}
		out = append(out, ListedPreview{Preview: rec, Token: key.Sign(l, rec.Incarnation)})
	}
	return out, nil
}

// RevokePreview revokes sid's link id on every replica (within the
// watcher's delivery, well under a second). ErrNotFound when sid lists no
// such link.
func (p *Pool) RevokePreview(ctx context.Context, sid, id string) error {
	lid, ok := preview.ParseID(id)
	if !ok {
		return ErrNotFound
	}
	now := p.clock.Now()
	expires, found, err := p.store.RevokePreview(ctx, sid, id, now)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if !found {
		return ErrNotFound
	}
	// This replica need not wait for its own announcement.
	p.links.Revoked.Add(lid, uint32(expires.Unix()), now)
	return nil
}

// PreviewRoute resolves a link: its form, expiry, key and revocation
// first (no I/O), then the sandbox's route, then the signature over that
// route's incarnation. The cached path makes no Redis round trip and no
// allocation; a miss reads the record (never provisions). Anything wrong
// is ErrNotFound, whatever it was, so a prober learns nothing.
func (p *Pool) PreviewRoute(ctx context.Context, tok string) (*PreviewRoute, preview.Link, Outcome, error) {
	start := time.Now()
	l, mac, ok := p.links.Check(tok, nowAt(p.clock, start))
	if !ok {
		return nil, l, "", ErrNotFound
	}
	var sid [16]byte
	l.SandboxHex(&sid)
	r := p.cache.sandboxBytes(sid[:], nowAt(p.clock, start))
	outcome := OutcomeHit
	if r == nil {
		var err error
		sidStr := string(sid[:])
		r, outcome, err = p.reuseExisting(ctx, func(ctx context.Context) (state.Record, bool, error) {
			return p.store.Get(ctx, sidStr)
		}, false, start)
		if err != nil {
			return nil, l, "", err
		}
	} else {
		r.touch()
		p.obs.hit(ctx, r, start)
	}
	if !p.links.Keys.Verify(&l, mac, r.Incarnation) {
		return nil, l, "", ErrNotFound
	}
	return &r.preview, l, outcome, nil
}

// RotatePreviewKey makes a new fleet key sign new links; every replica
// loads it within the watcher's delivery. The previous key keeps
// verifying until retires, when every link it signed has expired.
func (p *Pool) RotatePreviewKey(ctx context.Context) (id uint16, retires time.Time, err error) {
	now := p.clock.Now()
	if id, err = p.store.RotatePreviewKey(ctx, now, p.cfg.PreviewMaxTTL); err != nil {
		return 0, time.Time{}, fmt.Errorf("%w: %w", ErrState, err)
	}
	return id, now.Add(p.cfg.PreviewMaxTTL), nil
}

// RecheckPreview is called after a dial-class failure against failed: the
// cached route goes and the sandbox is looked up again with its liveness
// verified; only the same incarnation will do.
func (p *Pool) RecheckPreview(ctx context.Context, failed *PreviewRoute) (*PreviewRoute, error) {
	p.cache.drop(failed.SandboxID, failed.Route)
	sid := failed.SandboxID
	r, _, err := p.reuseExisting(ctx, func(ctx context.Context) (state.Record, bool, error) {
		return p.store.Get(ctx, sid)
	}, true, time.Now())
	if err != nil {
		return nil, err
	}
	if r.Incarnation != failed.Incarnation {
		return nil, ErrNotFound
	}
	return &r.preview, nil
}
