package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/state"
)

// Holder stops a thread's sandbox around work on its files (Hold), and
// freezes it on demand (FreezeThread).
type Holder struct{ p holderParams }

type holderParams struct {
	// lockWait is how long a hold waits for the sandbox's lock
	// (Config.ProvisionWait); freezeWait how long until every replica's
	// cached route has run out (cache_ttl and a touch interval).
	lockWait, freezeWait time.Duration
	backend              string
	warmPaused           bool // warm sandboxes are paused (PauseWarm)
	store                holdStore
	cache                *cache
	locks                locks
	probe                *prober
	stopper              *stopper // its Freezer nil: the backend cannot stop a sandbox
	obs                  observer
	clock                Clock
	log                  *slog.Logger
}

// holdStore reads a record and marks it frozen or thawed.
type holdStore interface {
	Get(ctx context.Context, sid string) (state.Record, bool, error)
	Freeze(ctx context.Context, sid, incarnation string, cutoff, now time.Time) (bool, error)
	Thaw(ctx context.Context, sid, incarnation string) (bool, error)
}

func newHolder(p holderParams) *Holder { return &Holder{p: p} }

// FreezeThread freezes (user, thread)'s sandbox now, as the freezer would
// once it is idle: the record is marked at once (no replica routes to it
// from then on), and the processes stop once every replica's cached route
// has expired (cache_ttl and a touch interval) unused and the sandbox runs
// nothing: otherwise ErrBusy and nothing changes. Frozen already is nil.
func (h *Holder) FreezeThread(ctx context.Context, user, thread string) error {
	if h.p.stopper.pz == nil {
		return backend.Unsupported("freeze", "the backend cannot stop a sandbox's processes (kubernetes: set kubernetes_server to run Sandgate's server, which stops its own)")
	}
	sid := identity.SandboxID(user, thread)
	rec, unlock, err := h.lockThread(ctx, sid, user, thread)
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
	if h.p.cache.serving(sid) {
		return fmt.Errorf("%w: a request is in flight", ErrBusy)
	}
	// Marked first, with "now" as cutoff, so nothing routes to it anew;
	// then the routes cached before the mark run out.
	mark := h.p.clock.Now()
	marked, err := h.p.store.Freeze(ctx, sid, rec.Incarnation, mark, mark)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if !marked {
		return fmt.Errorf("%w: sandbox changed", ErrNotFound)
	}
	h.p.cache.drop(sid, nil)
	select {
	case <-time.After(h.p.freezeWait):
	case <-ctx.Done():
		_, _ = h.p.store.Thaw(context.WithoutCancel(ctx), sid, rec.Incarnation)
		return ctx.Err()
	}
	err = h.p.stopper.stopMarked(ctx, rec, mark, true)
	if errors.Is(err, errActivated) {
		return fmt.Errorf("%w: it was used meanwhile", ErrBusy)
	}
	return err
}

// lockThread takes the lock of sid, (user, thread)'s sandbox, and reads its
// record: ErrNotFound without one. unlock is never nil; call it.
func (h *Holder) lockThread(ctx context.Context, sid, user, thread string) (_ state.Record, unlock func(), _ error) {
	held, err := h.p.locks.lock(ctx, sid, h.p.lockWait)
	if err != nil {
		return state.Record{}, func() {}, lockErr(err)
	}
	unlock = func() { h.p.locks.unlock(held) }
	rec, ok, err := h.p.store.Get(ctx, sid)
	if err != nil {
		return rec, unlock, fmt.Errorf("%w: %w", ErrState, err)
	}
	if !ok || rec.State == state.StateDestroying {
		return rec, unlock, ErrNotFound
	}
	if rec.User != user || rec.Thread != thread {
		return rec, unlock, conflict(ctx, h.p.log, rec, user, thread)
	}
	return rec, unlock, nil
}

// Hold runs fn with (user, thread)'s sandbox, if it has a running one,
// stopped: under its lock, its processes frozen for fn's length and thawed
// after (one frozen already stays so). Checkpoints and restores run in it,
// so the sandbox never sees half a tree. Unless force, a sandbox that runs
// a command or serves a request is refused with ErrBusy first.
func (h *Holder) Hold(ctx context.Context, user, thread string, force bool, fn func() error) error {
	sid := identity.SandboxID(user, thread)
	rec, unlock, err := h.lockThread(ctx, sid, user, thread)
	defer unlock()
	if errors.Is(err, ErrNotFound) {
		return fn() // no sandbox: nothing runs against the files
	}
	if err != nil {
		return err
	}
	pz := h.p.stopper.pz
	if pz == nil || thawsUnderLock(rec, h.p.warmPaused) { // cannot stop, or stopped already (frozen, paused warm)
		return fn()
	}
	if !force {
		if h.p.cache.serving(sid) {
			return fmt.Errorf("%w: a request is in flight", ErrBusy)
		}
		if _, err := h.p.probe.busy(ctx, rec); err != nil {
			return err
		}
	}
	// Marked first, as a freeze is: a replica that dies holding the sandbox
	// leaves it marked, and the next request thaws it once the lock lapses.
	// Meanwhile a replica with a cached route sends requests that wait in
	// the stopped sandbox and run after fn, in the tree fn left.
	now := h.p.clock.Now()
	if marked, err := h.p.store.Freeze(ctx, sid, rec.Incarnation, now, now); err != nil || !marked {
		return cmpErr(err, fmt.Errorf("%w: sandbox changed", ErrNotFound))
	}
	rec.Frozen = now
	sctx, span := h.p.obs.span(ctx, spanFreeze, sid, thread)
	err = pz.Freeze(sctx, rec.Info())
	end(span, err)
	if err != nil {
		_, _ = h.p.store.Thaw(context.WithoutCancel(ctx), sid, rec.Incarnation)
		return fmt.Errorf("%w: freeze sandbox: %w", backend.ErrUnavailable, err)
	}
	defer func() {
		if err := h.p.stopper.thaw(context.WithoutCancel(ctx), rec); err != nil {
			h.p.log.ErrorContext(ctx, "thaw sandbox after hold", "sandbox_id", sid, "thread", thread, "err", err)
		}
	}()
	return fn()
}
