package pool

import (
	"context"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/state"
)

// Capability returns the capability of sid's current incarnation, minting
// it on first use (ErrNotFound if the sandbox is gone or being destroyed).
func (p *Pool) Capability(ctx context.Context, sid string) (string, error) {
	capability, ok, err := p.store.Capability(ctx, sid)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrState, err)
	}
	if !ok {
		return "", ErrNotFound
	}
	return capability, nil
}

// CapabilityRoute returns the route a well-formed capability opens (check
// state.ValidCapability first). The cached path is one SHA-256 and a map
// read: no Redis round trip, no allocation. It never provisions: an unknown,
// revoked or dead capability is ErrNotFound.
func (p *Pool) CapabilityRoute(ctx context.Context, capability string) (*CapRoute, Outcome, error) {
	start := time.Now()
	sum := state.SumCapability(capability)
	if cr := p.cache.capability(sum, nowAt(p.clock, start)); cr != nil {
		cr.touch()
		p.obs.hit(ctx, cr.Route, start)
		return cr, OutcomeHit, nil
	}
	return p.capabilitySlow(ctx, sum, false, start)
}

// RecheckCapability is called after a dial-class failure against failed: the
// cached route goes, and the capability is looked up again with the
// sandbox's liveness verified. A sandbox destroyed elsewhere, or dead, is
// ErrNotFound.
func (p *Pool) RecheckCapability(ctx context.Context, failed *CapRoute) (*CapRoute, error) {
	p.cache.drop(failed.SandboxID, failed.Route)
	cr, _, err := p.capabilitySlow(ctx, failed.sum, true, time.Now())
	return cr, err
}

func (p *Pool) capabilitySlow(ctx context.Context, sum state.CapabilitySum, verify bool, start time.Time) (*CapRoute, Outcome, error) {
	r, outcome, err := p.reuseExisting(ctx, func(ctx context.Context) (state.Record, bool, error) {
		return p.store.ByCapability(ctx, sum)
	}, verify, start)
	if err != nil {
		return nil, "", err
	}
	return p.cache.putCapability(sum, r), outcome, nil
}

// reuseExisting routes to the record read returns, never provisioning:
// the path behind a cache miss of a credential that names one incarnation
// (a capability, a preview link). A missing, dead or replaced sandbox is
// ErrNotFound. A frozen or paused one is thawed under its lock, the record
// read again there.
func (p *Pool) reuseExisting(ctx context.Context, read func(context.Context) (state.Record, bool, error), verify bool, start time.Time) (*Route, Outcome, error) {
	rec, ok, err := read(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrState, err)
	}
	if !ok || rec.State == state.StateDestroying {
		return nil, "", ErrNotFound
	}
	if identity.SandboxID(rec.User, rec.Thread) != rec.SandboxID {
		return nil, "", conflict(ctx, p.log, rec, rec.User, rec.Thread)
	}
	ctx, span := p.obs.startAcquire(ctx, rec.User, rec.Thread)
	if thawsUnderLock(rec, p.warmPauser != nil) {
		// Thawing a frozen or paused sandbox must not interleave with a freeze.
		held, err := p.locks.lock(ctx, rec.SandboxID, p.cfg.ProvisionWait)
		if err != nil {
			p.obs.acquired(span, start, "", err)
			return nil, "", lockErr(err)
		}
		defer p.locks.unlock(held)
		if rec, ok, err = read(ctx); err != nil || !ok || rec.State == state.StateDestroying {
			err = capabilityGone(err)
			p.obs.acquired(span, start, "", err)
			return nil, "", err
		}
	}
	r, outcome, err := p.reuse(ctx, rec, verify)
	if err == nil && r == nil {
		err = ErrNotFound // dead or replaced: the credential died with its incarnation
	}
	p.obs.acquired(span, start, outcome, err)
	if err != nil {
		return nil, "", err
	}
	r.touch()
	return r, outcome, nil
}

func capabilityGone(err error) error {
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	return ErrNotFound
}
