package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// maxEvictions bounds how many warm sandboxes one create may evict while
// racing other replicas for the same capacity.
const maxEvictions = 8

// Retry-After of per-user refusals: a create in progress ends within
// seconds; a held sandbox frees up when its user releases or deletes one.
const (
	retryUserCreates = 2 * time.Second
	retryUserHeld    = 5 * time.Second
)

type quotaExemptKey struct{}

// WithoutUserQuota exempts the creates of ctx from the per-user limits,
// the fair share and the create rate (admin principals, and the local
// principal of a gateway without authentication). Only creates read it.
func WithoutUserQuota(ctx context.Context) context.Context {
	return context.WithValue(ctx, quotaExemptKey{}, true)
}

func quotaExempt(ctx context.Context) bool {
	v, _ := ctx.Value(quotaExemptKey{}).(bool)
	return v
}

// capacity reserves the fleet-wide capacity of a create (statedb.Store.Reserve),
// evicting a warm sandbox or taking a pre-started one as the reservation says.
type capacity struct {
	cfg       Config
	store     reserveStore
	takes     *takes
	locks     locks
	destroyer *destroyer
	notes     *notifier
	obs       observer
	metrics   *telemetry.Metrics
	clock     Clock
	log       *slog.Logger
}

// reserveStore reserves capacity and claims an evicted sandbox's record.
type reserveStore interface {
	Reserve(ctx context.Context, req state.ReserveRequest) (state.ReserveResult, error)
	ClaimExpired(ctx context.Context, sid string, index state.Index, cutoff, now time.Time) (state.Record, bool, error)
}

// reserve takes a unit of fleet-wide capacity for sid, evicting a warm
// sandbox when the pool or the user is full (see statedb.scriptReserve for
// which). Soft mode (DeerFlow's) goes beyond the cap with a warning when
// nothing is warm; hard mode waits up to AcquireTimeout, then answers
// ErrCapacity. A user over a per-user limit or, at a full hard cap, over its
// fair share gets a *QuotaError at once.
//
// With claim (a prewarmFingerprint), a pre-started sandbox made from it is
// offered before any capacity is reserved: it is returned taken (its
// capacity unit now sid's reservation) with its lock held, which the
// caller releases.
func (p *capacity) reserve(ctx context.Context, user, thread, sid, claim string) (taken state.Record, held *statedb.Held, err error) {
	req := state.ReserveRequest{SandboxID: sid, User: user, Max: max(p.cfg.MaxSandboxes, 0), Hard: p.cfg.HardCap}
	if claim != "" {
		req.Kind, req.Prewarm = state.KindTake, claim
	}
	exempt := quotaExempt(ctx)
	if !exempt {
		req.MaxPerUser, req.MaxCreatesPerUser = p.cfg.MaxSandboxesPerUser, p.cfg.MaxCreatesPerUser
	}
	if req.Max == 0 && req.MaxPerUser == 0 && req.MaxCreatesPerUser == 0 && claim == "" {
		return state.Record{}, nil, nil
	}
	ctx, span := p.obs.span(ctx, spanReserve, sid, thread)
	defer func() { end(span, err) }()
	deadline := time.Now().Add(p.cfg.AcquireTimeout)
	queued := false
	for evictions := 0; ; {
		req.Now = p.clock.Now()
		req.Deadline = req.Now.Add(p.cfg.CreateTimeout + p.cfg.LockTTL)
		res, err := p.store.Reserve(ctx, req)
		if err != nil {
			return state.Record{}, nil, fmt.Errorf("%w: %w", ErrState, err)
		}
		switch res.Outcome {
		case "ok":
			return state.Record{}, nil, nil
		case "prewarm":
			rec, held, ok, err := p.takes.takePrewarm(ctx, res.Victim, sid, user)
			if err != nil || ok {
				return rec, held, err
			}
			// Another replica or request took it (or holds its lock):
			// offered another, picked at random among those that match (the
			// others who lost this race retry too), or capacity; after a
			// few, a plain reservation.
			req.Spread = rand.Uint32() | 1
			if evictions++; evictions > maxEvictions {
				req.Kind = ""
			}
		case "over":
			p.log.WarnContext(ctx, "soft cap exceeded: creating beyond max_sandboxes, nothing warm to evict",
				"sandbox_id", sid, "thread", thread, "max_sandboxes", p.cfg.MaxSandboxes)
			return state.Record{}, nil, nil
		case "evict":
			if evictions++; evictions > maxEvictions {
				return state.Record{}, nil, fmt.Errorf("%w: could not evict a warm sandbox", ErrCapacity)
			}
			reason := ReasonEvicted
			if res.Quota {
				reason = ReasonQuota
			}
			p.evict(ctx, res.Victim, reason)
		case "user_max":
			return state.Record{}, nil, &QuotaError{User: user, Limit: LimitSandboxesPerUser, Max: p.cfg.MaxSandboxesPerUser, RetryAfter: retryUserHeld}
		case "user_creates":
			return state.Record{}, nil, &QuotaError{User: user, Limit: LimitCreatesPerUser, Max: p.cfg.MaxCreatesPerUser, RetryAfter: retryUserCreates}
		case "share":
			if !exempt {
				return state.Record{}, nil, &QuotaError{User: user, Limit: LimitFairShare, Max: res.Held, RetryAfter: retryUserHeld}
			}
			fallthrough // an admin is held to no share: it waits for room as at a full cap
		case "full":
			if time.Now().After(deadline) {
				return state.Record{}, nil, fmt.Errorf("%w: %d sandboxes, none warm", ErrCapacity, p.cfg.MaxSandboxes)
			}
			if !queued { // once per create: the wait is one step
				queued = true
				p.notes.publish(ctx, events.Queued, sid, user, thread, "")
			}
			select {
			case <-ctx.Done():
				return state.Record{}, nil, ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		default:
			return state.Record{}, nil, fmt.Errorf("%w: unexpected reserve outcome %q", ErrState, res.Outcome)
		}
	}
}

// evict destroys sid if it is still warm, for reason (evicted: the fleet's
// room; quota: its user's). Losing the race (it was reclaimed, or another
// replica evicts it) is fine: the caller reserves again.
func (p *capacity) evict(ctx context.Context, sid string, reason DestroyReason) {
	ctx, span := p.obs.span(ctx, spanEvict, sid, "")
	defer span.End()
	held, err := p.locks.lock(ctx, sid, time.Second)
	if err != nil {
		if !errors.Is(err, state.ErrLocked) {
			p.log.WarnContext(ctx, "evict: lock", "sandbox_id", sid, "err", err)
		}
		return
	}
	defer p.locks.unlock(held)
	// Claim only if still in the warm or prewarm index (any score): a
	// reclaimed or claimed one is spared.
	now := p.clock.Now()
	rec, ok, err := p.store.ClaimExpired(ctx, sid, state.IndexWarm, farFuture, now)
	if err == nil && !ok {
		rec, ok, err = p.store.ClaimExpired(ctx, sid, state.IndexPrewarm, farFuture, now)
	}
	if err != nil || !ok {
		return
	}
	if err := p.destroyer.destroyClaimed(ctx, rec, reason); err != nil {
		p.log.WarnContext(ctx, "evict", "sandbox_id", sid, "err", err)
		telemetry.Fail(span, err)
		return
	}
	p.metrics.Evicted()
}

var farFuture = time.Unix(1<<40, 0)
