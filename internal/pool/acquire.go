package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/state"
)

// Acquire returns the route of (user, thread)'s sandbox, creating it if
// needed. Concurrent acquires of one sandbox on this replica share one
// attempt; across replicas the sandbox lock makes exactly one create.
// user and thread must be validated.
func (p *Pool) Acquire(ctx context.Context, user, thread string) (*Route, Outcome, error) {
	start := time.Now()
	if r := p.cache.thread(user, thread, nowAt(p.clock, start)); r != nil {
		r.touch()
		p.obs.hit(ctx, r, start)
		return r, OutcomeHit, nil
	}
	ctx, span := p.obs.startAcquire(ctx, user, thread)
	r, o, err := p.acquire(ctx, user, thread, false)
	p.obs.acquired(span, start, o, err)
	return r, o, err
}

// Reacquire is called after a dial-class failure against failed: the route
// is dropped and the sandbox's liveness verified, so a sandbox killed behind
// the gateway's back is recreated.
func (p *Pool) Reacquire(ctx context.Context, failed *Route) (*Route, Outcome, error) {
	start := time.Now()
	p.cache.drop(failed.SandboxID, failed)
	ctx, span := p.obs.startAcquire(ctx, failed.User, failed.Thread)
	r, o, err := p.acquire(ctx, failed.User, failed.Thread, true)
	p.obs.acquired(span, start, o, err)
	return r, o, err
}

type acquired struct {
	route   *Route
	outcome Outcome
}

func (p *Pool) acquire(ctx context.Context, user, thread string, verify bool) (*Route, Outcome, error) {
	sid := identity.SandboxID(user, thread)
	key := sid
	if verify {
		key += "/verify"
	}
	// The attempt runs detached from this request: a client that gives up
	// must not abort a create other requests wait for.
	ch := p.flight.DoChan(key, func() (any, error) {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.CreateTimeout+p.cfg.LockTTL)
		defer cancel()
		r, o, err := p.acquireSlow(actx, user, thread, sid, verify)
		if err != nil {
			p.notes.failed(actx, user, thread, sid, err)
		}
		return acquired{r, o}, err
	})
	wait := time.NewTimer(p.cfg.ProvisionWait)
	defer wait.Stop()
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, "", res.Err
		}
		a := res.Val.(acquired)
		a.route.touch()
		return a.route, a.outcome, nil
	case <-wait.C:
		return nil, "", fmt.Errorf("%w: still creating after %s", ErrProvisioning, p.cfg.ProvisionWait)
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
}

// Owner decides who may reach a sandbox by id.
type Owner interface {
	Owns(user, thread string) bool
}

// Route returns the cached route of sid, or acquires it from its Redis
// record, for a caller who owns it. It never creates: an unknown sid is
// ErrNotFound, and so is a sandbox who does not own, which is then neither
// touched nor reclaimed from the warm pool.
func (p *Pool) Route(ctx context.Context, sid string, who Owner) (*Route, Outcome, error) {
	start := time.Now()
	if r := p.cache.sandbox(sid, nowAt(p.clock, start)); r != nil {
		if !who.Owns(r.User, r.Thread) {
			return nil, "", ErrNotFound
		}
		r.touch()
		p.obs.hit(ctx, r, start)
		return r, OutcomeHit, nil
	}
	rec, ok, err := p.store.Get(ctx, sid)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrState, err)
	}
	if !ok || rec.State == state.StateDestroying || !who.Owns(rec.User, rec.Thread) {
		return nil, "", ErrNotFound
	}
	if identity.SandboxID(rec.User, rec.Thread) != sid {
		return nil, "", conflict(ctx, p.log, rec, rec.User, rec.Thread)
	}
	ctx, span := p.obs.startAcquire(ctx, rec.User, rec.Thread)
	r, o, err := p.acquire(ctx, rec.User, rec.Thread, false)
	p.obs.acquired(span, start, o, err)
	return r, o, err
}

// acquireSlow is the path behind a cache miss: read the record, reuse it if
// it is usable, otherwise provision under the sandbox's lock.
func (p *Pool) acquireSlow(ctx context.Context, user, thread, sid string, verify bool) (*Route, Outcome, error) {
	rec, ok, err := p.store.Get(ctx, sid)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrState, err)
	}
	if ok && (rec.User != user || rec.Thread != thread) {
		return nil, "", conflict(ctx, p.log, rec, user, thread)
	}
	if ok && p.ended.take(sid, rec.Incarnation) {
		verify = true
	}
	// A frozen or paused warm sandbox is thawed under the lock, in provision.
	if ok && !thawsUnderLock(rec, p.warmPauser != nil) {
		r, outcome, err := p.reuse(ctx, rec, verify)
		if r != nil || err != nil {
			return r, outcome, err
		}
	}
	return p.provision(ctx, user, thread, sid)
}

// reuse returns a route for an existing record, or nil when the record is
// unusable (dead, or being destroyed) and the caller must provision.
func (p *Pool) reuse(ctx context.Context, rec state.Record, verify bool) (*Route, Outcome, error) {
	switch rec.State {
	case state.StateActive, state.StateWarm:
	default:
		return nil, "", nil
	}
	// A warm sandbox is checked before it is handed out: it may have died
	// while parked. An active one only when a dial to it just failed. A
	// thaw checks by itself (it fails on a sandbox that is gone): only a
	// failed one is followed by the liveness check.
	thaw := thawsUnderLock(rec, p.warmPauser != nil)
	if (rec.State == state.StateWarm || verify) && !thaw {
		if gone, err := p.dropIfDead(ctx, rec); gone || err != nil {
			return nil, "", err
		}
	}
	if thaw {
		if err := p.stopper.thaw(ctx, rec); err != nil {
			if gone, derr := p.dropIfDead(ctx, rec); gone || derr != nil {
				return nil, "", derr
			}
			return nil, "", err
		}
	}
	ok, err := p.store.Activate(ctx, rec.SandboxID, rec.Incarnation, p.clock.Now())
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrState, err)
	}
	if !ok { // changed under us (claimed, replaced): provision under the lock
		return nil, "", nil
	}
	r, err := p.newRoute(rec)
	if err != nil {
		return nil, "", err
	}
	if rec.State == state.StateWarm {
		p.log.InfoContext(ctx, "sandbox reclaimed from warm pool", "sandbox_id", rec.SandboxID, "thread", rec.Thread)
		p.notes.ready(ctx, r, OutcomeWarm)
		return r, OutcomeWarm, nil
	}
	if !rec.Frozen.IsZero() {
		return r, OutcomeThawed, nil
	}
	return r, OutcomeHit, nil
}

// dropIfDead asks the backend whether rec's sandbox still runs and, if
// not, drops its record: gone is true and the caller provisions.
func (p *Pool) dropIfDead(ctx context.Context, rec state.Record) (gone bool, err error) {
	alive, err := p.backend.alive(ctx, rec)
	if err != nil {
		return false, fmt.Errorf("%w: check sandbox: %w", backend.ErrUnavailable, err)
	}
	if alive {
		return false, nil
	}
	p.log.WarnContext(ctx, "sandbox record points to a dead sandbox; dropping it",
		"sandbox_id", rec.SandboxID, "thread", rec.Thread, "state", rec.State)
	if _, err := p.store.Forget(ctx, rec.SandboxID, rec.Incarnation); err != nil {
		return true, fmt.Errorf("%w: %w", ErrState, err)
	}
	p.notes.gone(ctx, rec, ReasonVanished)
	return true, nil
}

// provision runs under the sandbox's lock: re-check the record (another
// replica may have just created it), adopt a running sandbox the backend
// knows, or reserve capacity and create one.
func (p *Pool) provision(ctx context.Context, user, thread, sid string) (*Route, Outcome, error) {
	held, err := p.locks.lock(ctx, sid, p.cfg.ProvisionWait)
	if err != nil {
		return nil, "", lockErr(err)
	}
	ctx, after := withAfterAnswer(ctx)
	defer p.bg.unlockAfter(p.locks, held, after)
	// A lost lock means another replica may start the same sandbox; stop.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-held.Lost():
			cancel()
		case <-ctx.Done():
		}
	}()

	rec, ok, options, err := p.store.GetWithOptions(ctx, sid)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrState, err)
	}
	if ok && (rec.User != user || rec.Thread != thread) {
		return nil, "", conflict(ctx, p.log, rec, user, thread)
	}
	if ok {
		if rec.State == state.StateDestroying {
			// A destroyer died half way (its lock expired): finish its job.
			if err := p.backend.destroy(ctx, rec); err != nil {
				return nil, "", fmt.Errorf("%w: finish interrupted destroy: %w", backend.ErrUnavailable, err)
			}
			if _, err := p.store.Forget(ctx, sid, rec.Incarnation); err != nil {
				return nil, "", fmt.Errorf("%w: %w", ErrState, err)
			}
			p.metrics.Destroyed(string(ReasonInterrupted))
			p.notes.gone(ctx, rec, string(ReasonInterrupted))
		} else if r, outcome, err := p.reuse(ctx, rec, true); r != nil || err != nil {
			return r, outcome, err
		}
	}

	info, found, err := p.backend.discover(ctx, sid, thread)
	if err != nil {
		return nil, "", fmt.Errorf("%w: discover: %w", backend.ErrUnavailable, err)
	}
	if found && (info.User != "" && info.User != user || info.Thread != "" && info.Thread != thread) {
		// A running sandbox labelled with another identity is never adopted for this one.
		return nil, "", conflict(ctx, p.log, state.RecordFromInfo(info, ""), user, thread)
	}
	if found {
		r, err := p.record(ctx, info, user, thread)
		if err != nil {
			return nil, "", err
		}
		p.metrics.Adopted("acquire")
		p.log.InfoContext(ctx, "adopted running sandbox", "sandbox_id", sid, "thread", thread)
		p.notes.ready(ctx, r, OutcomeAdopted)
		return r, OutcomeAdopted, nil
	}

	if p.newThread != nil {
		if err := p.newThread(ctx, user, thread); err != nil {
			return nil, "", err
		}
	}
	if p.creates != nil && !quotaExempt(ctx) {
		wait, ok, err := p.creates.AllowCreate(ctx, user)
		if err != nil {
			return nil, "", err
		}
		if !ok {
			return nil, "", &RateLimitError{User: user, RetryAfter: wait}
		}
	}
	t, o, err := p.createFrom(ctx, sid, thread, options)
	if err != nil {
		return nil, "", err
	}
	taken, takenLock, err := p.capacity.reserve(ctx, user, thread, sid, p.takes.takeable(user, thread, t, o))
	if err != nil {
		return nil, "", err
	}
	if takenLock != nil {
		if r, err := p.takes.take(ctx, taken, takenLock, user, thread, sid, t); err == nil {
			p.notes.ready(ctx, r, OutcomePrewarm)
			return r, OutcomePrewarm, nil
		}
	}
	r, err := p.create(ctx, user, thread, sid, t, o)
	if err != nil {
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer ucancel()
		if uerr := p.store.Unreserve(uctx, sid, user); uerr != nil {
			p.log.WarnContext(ctx, "give back capacity reservation", "sandbox_id", sid, "err", uerr)
		}
		return nil, "", err
	}
	p.notes.ready(ctx, r, OutcomeCold)
	return r, OutcomeCold, nil
}

func (p *Pool) create(ctx context.Context, user, thread, sid string, t Template, o Options) (*Route, error) {
	// Only the paths: backends that bind host dirs create them in Create
	// (backend.EnsureHostDirs); the others never need the gateway's disk.
	mounts, err := backend.ThreadMounts(p.cfg.Mounts, user, thread)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	secret, err := newSecret()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCreate, err)
	}
	egress, set, err := p.store.Egress(ctx, sid) // creates only: never on the request path
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	spec := p.recipe.apply(backend.Spec{SandboxID: sid, User: user, Thread: thread, Mounts: mounts, Secret: secret},
		t, o, egress, set)
	p.notes.publish(ctx, events.Starting, sid, user, thread, "")
	cctx, cancel := context.WithTimeout(p.notes.withProgress(ctx, user, thread, sid), p.cfg.CreateTimeout)
	defer cancel()
	start := time.Now()
	cctx, span := p.obs.span(cctx, spanCreate, sid, thread)
	info, err := p.backend.be.Create(cctx, spec)
	end(span, err)
	p.metrics.Created(err == nil)
	if err != nil {
		switch {
		case errors.Is(err, backend.ErrUnavailable):
			return nil, err
		case errors.Is(err, backend.ErrHostDirs):
			return nil, fmt.Errorf("%w: %w", ErrStorage, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrCreate, err)
	}
	r, err := p.record(ctx, info, user, thread)
	if err != nil {
		return nil, err
	}
	p.log.InfoContext(ctx, "sandbox created", "sandbox_id", sid, "thread", thread, "template", t.Name,
		"incarnation", info.Incarnation, "took_ms", time.Since(start).Milliseconds())
	return r, nil
}
