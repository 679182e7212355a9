package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/state"
)

// FreezeThread freezes (user, thread)'s sandbox now, as the freezer would
// once it is idle: the record is marked at once (no replica routes to it
// from then on), and the processes stop once every replica's cached route
// has expired (cache_ttl and a touch interval) unused and the sandbox runs
// nothing: otherwise ErrBusy and nothing changes. Frozen already is nil.
func (p *Pool) FreezeThread(ctx context.Context, user, thread string) error {
	pz, ok := p.backend.(backend.Pauser)
	if !ok {
		return fmt.Errorf("%w: backend %s cannot freeze", backend.ErrNotSupported, p.name)
	}
	sid := identity.SandboxID(user, thread)
	rec, unlock, err := p.lockThread(ctx, sid, user, thread)
	defer unlock()
	if err != nil {
		return err
	}
	if !rec.Frozen.IsZero() {
		return nil
	}
	if rec.State != state.StateActive {
		return fmt.Errorf("%w: sandbox is %s", ErrNotFound, rec.State)
	}
	if p.servingHere(sid) {
		return fmt.Errorf("%w: a request is in flight", ErrBusy)
	}
	// Marked first, with "now" as cutoff, so nothing routes to it anew;
	// then the routes cached before the mark run out.
	mark := p.clock.Now()
	marked, err := p.store.Freeze(ctx, sid, rec.Incarnation, mark, mark)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if !marked {
		return fmt.Errorf("%w: sandbox changed", ErrNotFound)
	}
	p.cache.drop(sid, nil)
	select {
	case <-time.After(p.cfg.CacheTTL + p.cfg.TouchInterval):
	case <-ctx.Done():
		_, _ = p.store.Thaw(context.WithoutCancel(ctx), sid, rec.Incarnation)
		return ctx.Err()
	}
	err = p.stopMarked(ctx, pz, rec, mark, true)
	if errors.Is(err, errActivated) {
		return fmt.Errorf("%w: it was used meanwhile", ErrBusy)
	}
	return err
}

// lockThread takes the lock of sid, (user, thread)'s sandbox, and reads its
// record: ErrNotFound without one. unlock is never nil; call it.
func (p *Pool) lockThread(ctx context.Context, sid, user, thread string) (_ state.Record, unlock func(), _ error) {
	held, err := p.lock(ctx, sid, p.cfg.ProvisionWait)
	if err != nil {
		return state.Record{}, func() {}, lockErr(err)
	}
	unlock = func() { p.unlock(held) }
	rec, ok, err := p.store.Get(ctx, sid)
	if err != nil {
		return rec, unlock, fmt.Errorf("%w: %w", ErrState, err)
	}
	if !ok || rec.State == state.StateDestroying {
		return rec, unlock, ErrNotFound
	}
	if rec.User != user || rec.Thread != thread {
		return rec, unlock, p.conflict(ctx, rec, user, thread)
	}
	return rec, unlock, nil
}

// Hold runs fn with (user, thread)'s sandbox, if it has a running one,
// stopped: under its lock, its processes frozen for fn's length and thawed
// after (one frozen already stays so). Checkpoints and restores run in it,
// so the sandbox never sees half a tree. Unless force, a sandbox that runs
// a command or serves a request is refused with ErrBusy first.
func (p *Pool) Hold(ctx context.Context, user, thread string, force bool, fn func() error) error {
	sid := identity.SandboxID(user, thread)
	rec, unlock, err := p.lockThread(ctx, sid, user, thread)
	defer unlock()
	if errors.Is(err, ErrNotFound) {
		return fn() // no sandbox: nothing runs against the files
	}
	if err != nil {
		return err
	}
	pz, ok := p.backend.(backend.Pauser)
	if !ok || p.thawsUnderLock(rec) { // cannot stop, or stopped already (frozen, paused warm)
		return fn()
	}
	if !force {
		if p.servingHere(sid) {
			return fmt.Errorf("%w: a request is in flight", ErrBusy)
		}
		if _, err := p.busy(ctx, rec); err != nil {
			return err
		}
	}
	// Marked first, as a freeze is: a replica that dies holding the sandbox
	// leaves it marked, and the next request thaws it once the lock lapses.
	// Meanwhile a replica with a cached route sends requests that wait in
	// the stopped sandbox and run after fn, in the tree fn left.
	now := p.clock.Now()
	if marked, err := p.store.Freeze(ctx, sid, rec.Incarnation, now, now); err != nil || !marked {
		return cmpErr(err, fmt.Errorf("%w: sandbox changed", ErrNotFound))
	}
	rec.Frozen = now
	sctx, span := p.span(ctx, spanFreeze, sid, thread)
	err = pz.Pause(sctx, rec.Info())
	end(span, err)
	if err != nil {
		_, _ = p.store.Thaw(context.WithoutCancel(ctx), sid, rec.Incarnation)
		return fmt.Errorf("%w: freeze sandbox: %w", backend.ErrUnavailable, err)
	}
	defer func() {
		if err := p.thaw(context.WithoutCancel(ctx), rec); err != nil {
			p.log.ErrorContext(ctx, "thaw sandbox after hold", "sandbox_id", sid, "thread", thread, "err", err)
		}
	}()
	return fn()
}
