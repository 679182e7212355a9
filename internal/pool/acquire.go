package pool

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/state"
)

// acquireSlow is the path behind a cache miss: read the record, reuse it if
// it is usable, otherwise provision under the sandbox's lock.
func (p *Pool) acquireSlow(ctx context.Context, user, thread, sid string, verify bool) (*Route, Outcome, error) {
	rec, ok, err := p.store.Get(ctx, sid)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrState, err)
	}
	if ok && (rec.User != user || rec.Thread != thread) {
		return nil, "", p.conflict(ctx, rec, user, thread)
	}
	// A frozen or paused warm sandbox is thawed under the lock, in provision.
	if ok && !p.thawsUnderLock(rec) {
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
	thaw := p.thawsUnderLock(rec)
	if (rec.State == state.StateWarm || verify) && !thaw {
		if gone, err := p.dropIfDead(ctx, rec); gone || err != nil {
			return nil, "", err
		}
	}
	if thaw {
		if err := p.thaw(ctx, rec); err != nil {
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
		p.ready(ctx, r)
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
	alive, err := p.alive(ctx, rec)
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
	p.gone(ctx, rec, ReasonVanished)
	return true, nil
}

// thawsUnderLock: rec's sandbox must be thawed before it is routed to (it
// is frozen, or paused in the warm pool), which is done under its lock so
// it cannot interleave with a freeze or a pause.
func (p *Pool) thawsUnderLock(rec state.Record) bool {
	return !rec.Frozen.IsZero() || rec.State == state.StateWarm && p.pauser() != nil
}

// provision runs under the sandbox's lock: re-check the record (another
// replica may have just created it), adopt a running sandbox the backend
// knows, or reserve capacity and create one.
func (p *Pool) provision(ctx context.Context, user, thread, sid string) (*Route, Outcome, error) {
	held, err := p.lock(ctx, sid, p.cfg.ProvisionWait)
	if err != nil {
		return nil, "", lockErr(err)
	}
	ctx, after := withAfterAnswer(ctx)
	defer p.unlockAfter(held, after)
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

	rec, ok, err := p.store.Get(ctx, sid)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrState, err)
	}
	if ok && (rec.User != user || rec.Thread != thread) {
		return nil, "", p.conflict(ctx, rec, user, thread)
	}
	if ok {
		if rec.State == state.StateDestroying {
			// A destroyer died half way (its lock expired): finish its job.
			if err := p.destroyBackend(ctx, rec); err != nil {
				return nil, "", fmt.Errorf("%w: finish interrupted destroy: %w", backend.ErrUnavailable, err)
			}
			if _, err := p.store.Forget(ctx, sid, rec.Incarnation); err != nil {
				return nil, "", fmt.Errorf("%w: %w", ErrState, err)
			}
			p.metrics.Destroyed(string(ReasonInterrupted))
			p.gone(ctx, rec, string(ReasonInterrupted))
		} else if r, outcome, err := p.reuse(ctx, rec, true); r != nil || err != nil {
			return r, outcome, err
		}
	}

	info, found, err := p.discover(ctx, sid, thread)
	if err != nil {
		return nil, "", fmt.Errorf("%w: discover: %w", backend.ErrUnavailable, err)
	}
	if found && (info.User != "" && info.User != user || info.Thread != "" && info.Thread != thread) {
		// A running sandbox labelled with another identity is never adopted for this one.
		return nil, "", p.conflict(ctx, state.RecordFromInfo(info, ""), user, thread)
	}
	if found {
		r, err := p.record(ctx, info, user, thread)
		if err != nil {
			return nil, "", err
		}
		p.metrics.Adopted("acquire")
		p.log.InfoContext(ctx, "adopted running sandbox", "sandbox_id", sid, "thread", thread)
		p.ready(ctx, r)
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
	taken, takenLock, err := p.reserve(ctx, user, thread, sid, p.claimable(user, thread))
	if err != nil {
		return nil, "", err
	}
	if takenLock != nil {
		if r, err := p.claim(ctx, taken, takenLock, user, thread, sid); err == nil {
			p.ready(ctx, r)
			return r, OutcomePrewarm, nil
		}
	}
	r, err := p.create(ctx, user, thread, sid)
	if err != nil {
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer ucancel()
		if uerr := p.store.Unreserve(uctx, sid, user); uerr != nil {
			p.log.WarnContext(ctx, "give back capacity reservation", "sandbox_id", sid, "err", uerr)
		}
		return nil, "", err
	}
	p.ready(ctx, r)
	return r, OutcomeCold, nil
}

func (p *Pool) create(ctx context.Context, user, thread, sid string) (*Route, error) {
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
	if !set {
		egress = p.cfg.Egress
	}
	spec := backend.Spec{SandboxID: sid, User: user, Thread: thread, Mounts: mounts, Env: p.cfg.Env, Secret: secret, Egress: egress}
	spec.Labels = backend.IdentityLabels(spec, p.cfg.Instance, p.cfg.Labels)
	spec.Labels[backend.LabelFleet] = p.cfg.Fleet
	p.publish(ctx, events.Starting, sid, user, thread, "")
	cctx, cancel := context.WithTimeout(p.withProgress(ctx, user, thread, sid), p.cfg.CreateTimeout)
	defer cancel()
	start := time.Now()
	cctx, span := p.span(cctx, spanCreate, sid, thread)
	info, err := p.backend.Create(cctx, spec)
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
	p.log.InfoContext(ctx, "sandbox created", "sandbox_id", sid, "thread", thread,
		"incarnation", info.Incarnation, "took_ms", time.Since(start).Milliseconds())
	return r, nil
}

// newSecret mints a sandbox's own credential: 256 random bits, base64url.
func newSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("mint sandbox secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// conflict logs a record (or a running sandbox) at the caller's sandbox id
// that names another user or thread, and refuses it: the id formula cannot
// produce this (user names hold no ':'), so the record was written by an
// older version, a 64-bit prefix collision or someone with Redis access.
func (p *Pool) conflict(ctx context.Context, rec state.Record, user, thread string) error {
	p.log.WarnContext(ctx, "sandbox identity conflict: not served", "sandbox_id", rec.SandboxID,
		"user", user, "thread", thread, "record_user", rec.User, "record_thread", rec.Thread)
	return fmt.Errorf("%w: sandbox %s", ErrIdentityConflict, rec.SandboxID)
}

// discover asks the backend for a running sid in a span.
func (p *Pool) discover(ctx context.Context, sid, thread string) (backend.Info, bool, error) {
	ctx, span := p.span(ctx, spanDiscover, sid, thread)
	info, found, err := p.backend.Discover(ctx, sid)
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("found", found))
	}
	end(span, err)
	return info, found, err
}

// record writes an active record for a live sandbox and caches its route.
func (p *Pool) record(ctx context.Context, info backend.Info, user, thread string) (*Route, error) {
	info.User, info.Thread = user, thread
	if info.Backend == "" {
		info.Backend = p.name
	}
	if info.CreatedAt.IsZero() {
		info.CreatedAt = p.clock.Now()
	}
	rec := state.RecordFromInfo(info, state.StateActive)
	commit, err := p.store.RecordActive(ctx, rec, p.clock.Now())
	if err == nil {
		err = afterAnswer(ctx, commit)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	return p.newRoute(rec)
}
