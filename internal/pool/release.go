package pool

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/state"
)

// Release parks the thread's sandbox in the warm pool (paused, with
// PauseWarm and a backend that can).
func (p *Pool) Release(ctx context.Context, user, thread string) error {
	sid := identity.SandboxID(user, thread)
	pauser := p.warmPauser
	if pauser != nil {
		// Pause and a concurrent reclaim's resume must not interleave.
		held, err := p.locks.lock(ctx, sid, p.cfg.LockTTL)
		if err != nil {
			return lockErr(err)
		}
		defer p.locks.unlock(held)
	}
	ok, err := p.store.Release(ctx, sid, user, thread, p.clock.Now())
	if errors.Is(err, state.ErrIdentity) {
		rec, _, _ := p.store.Get(ctx, sid)
		rec.SandboxID = sid
		return conflict(ctx, p.log, rec, user, thread)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	p.cache.drop(sid, nil)
	if !ok {
		return ErrNotFound
	}
	if pauser != nil {
		if rec, found, err := p.store.Get(ctx, sid); err == nil && found {
			if err := pauser.Freeze(ctx, rec.Info()); err != nil {
				p.log.WarnContext(ctx, "pause warm sandbox", "sandbox_id", sid, "thread", thread, "err", err)
			}
		}
	}
	p.log.InfoContext(ctx, "sandbox released to warm pool", "sandbox_id", sid, "thread", thread)
	p.notes.publish(ctx, events.Released, sid, user, thread, "")
	return nil
}

// Destroy destroys sid now, whatever its state. ErrNotFound if unknown.
func (p *Pool) Destroy(ctx context.Context, sid string, reason DestroyReason) error {
	return p.destroy(ctx, sid, nil, reason)
}

// DestroyThread destroys the sandbox of (user, thread) now, only if its
// record is theirs (ErrIdentityConflict otherwise).
func (p *Pool) DestroyThread(ctx context.Context, user, thread string, reason DestroyReason) error {
	return p.destroy(ctx, identity.SandboxID(user, thread), func(rec state.Record) error {
		if rec.User != user || rec.Thread != thread {
			return conflict(ctx, p.log, rec, user, thread)
		}
		return nil
	}, reason)
}

// destroy claims and destroys sid under its lock; check, when set, vets the
// record first (records change identity only under the lock).
func (p *Pool) destroy(ctx context.Context, sid string, check func(state.Record) error, reason DestroyReason) error {
	held, err := p.locks.lock(ctx, sid, p.cfg.LockTTL)
	if err != nil {
		return lockErr(err)
	}
	defer p.locks.unlock(held)
	incarnation := ""
	if check != nil {
		rec, ok, err := p.store.Get(ctx, sid)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrState, err)
		}
		if !ok {
			return ErrNotFound
		}
		if err := check(rec); err != nil {
			return err
		}
		incarnation = rec.Incarnation
	}
	rec, ok, err := p.store.Claim(ctx, sid, incarnation)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if !ok {
		return ErrNotFound
	}
	return p.destroyer.destroyClaimed(ctx, rec, reason)
}
