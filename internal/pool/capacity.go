package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/lease"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// maxEvictions bounds how many warm sandboxes one create may evict while
// racing other replicas for the same capacity.
const maxEvictions = 8

// reserve takes a unit of fleet-wide capacity for sid, evicting the least
// recently released warm sandbox when the pool is full. Soft mode (DeerFlow's)
// goes beyond the cap with a warning when nothing is warm; hard mode waits up
// to AcquireTimeout, then answers ErrCapacity.
func (p *Pool) reserve(ctx context.Context, sid, thread string) (err error) {
	if p.cfg.MaxSandboxes < 0 {
		return nil
	}
	ctx, span := p.span(ctx, spanReserve, sid, thread)
	defer func() { end(span, err) }()
	deadline := time.Now().Add(p.cfg.AcquireTimeout)
	for evictions := 0; ; {
		now := p.clock.Now()
		res, err := p.store.Reserve(ctx, sid, p.cfg.MaxSandboxes, p.cfg.HardCap, now, now.Add(p.cfg.CreateTimeout+p.cfg.LockTTL))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrState, err)
		}
		switch res.Outcome {
		case "ok":
			return nil
		case "over":
			p.log.WarnContext(ctx, "soft cap exceeded: creating beyond max_sandboxes, nothing warm to evict",
				"sandbox_id", sid, "thread", thread, "max_sandboxes", p.cfg.MaxSandboxes)
			return nil
		case "evict":
			if evictions++; evictions > maxEvictions {
				return fmt.Errorf("%w: could not evict a warm sandbox", ErrCapacity)
			}
			p.evict(ctx, res.Victim)
		case "full":
			if time.Now().After(deadline) {
				return fmt.Errorf("%w: %d sandboxes, none warm", ErrCapacity, p.cfg.MaxSandboxes)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		default:
			return fmt.Errorf("%w: unexpected reserve outcome %q", ErrState, res.Outcome)
		}
	}
}

// evict destroys sid if it is still warm. Losing the race (it was reclaimed,
// or another replica evicts it) is fine: the caller reserves again.
func (p *Pool) evict(ctx context.Context, sid string) {
	ctx, span := p.span(ctx, spanEvict, sid, "")
	defer span.End()
	held, err := p.lock(ctx, sid, time.Second)
	if err != nil {
		if !errors.Is(err, lease.ErrLocked) {
			p.log.WarnContext(ctx, "evict: lock", "sandbox_id", sid, "err", err)
		}
		return
	}
	defer p.unlock(held)
	// Claim only if still in the warm index (any score): a reclaimed one is spared.
	rec, ok, err := p.store.ClaimExpired(ctx, sid, p.store.Keys().Warm(), farFuture)
	if err != nil || !ok {
		return
	}
	if err := p.destroyClaimed(ctx, rec, ReasonEvicted); err != nil {
		p.log.WarnContext(ctx, "evict", "sandbox_id", sid, "err", err)
		telemetry.Fail(span, err)
		return
	}
	p.metrics.Evicted()
}

var farFuture = time.Unix(1<<40, 0)
