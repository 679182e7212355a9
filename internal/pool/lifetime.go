package pool

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// Lifetime destroys sandboxes older than MaxLifetime, busy or not: a
// command that never ends (or one that looks busy to the activity probe by
// design) would otherwise keep its sandbox, and its share of the fleet,
// for good. Every replica runs one over the buckets it holds; the lock and
// the incarnation-checked claim make exactly one replica destroy each. A
// pass reads every record of those buckets, as the reconciler's does, so
// it runs at most once a minute (lifetimeInterval).
type Lifetime struct{ p lifetimeParams }

type lifetimeParams struct {
	maxLifetime, interval time.Duration
	store                 lifetimeStore
	held                  *heldBuckets
	locks                 locks
	destroyer             *destroyer
	tracer                trace.Tracer
	clock                 Clock
	log                   *slog.Logger
}

// lifetimeStore reads the records of some buckets and claims one.
type lifetimeStore interface {
	bucketRecorder
	claimStore
}

func newLifetime(p lifetimeParams) *Lifetime { return &Lifetime{p: p} }

// Run destroys over-age sandboxes every lifetimeInterval until ctx ends;
// max_lifetime < 0 disables it.
func (l *Lifetime) Run(ctx context.Context) {
	if l.p.maxLifetime < 0 {
		return
	}
	every(ctx, l.p.log, "lifetime", l.p.interval, func(ctx context.Context) error {
		_, err := l.Pass(ctx)
		return err
	})
}

// Pass destroys what is over age now and returns how many it destroyed.
func (l *Lifetime) Pass(ctx context.Context) (n int, err error) {
	p := l.p
	if p.maxLifetime < 0 {
		return 0, nil
	}
	ctx, span := telemetry.Root(ctx, p.tracer, spanLifetime)
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("destroyed", n))
		}
		end(span, err)
	}()
	records, err := p.store.BucketRecords(ctx, p.held.mine())
	if err != nil {
		return 0, err
	}
	cutoff := p.clock.Now().Add(-p.maxLifetime)
	for _, rec := range records {
		if !overAge(rec, cutoff) {
			continue
		}
		done, err := l.expire(ctx, rec.SandboxID, rec.Incarnation, cutoff)
		if err != nil {
			return n, err
		}
		if done {
			n++
		}
	}
	return n, nil
}

// overAge: rec is a thread's sandbox (active or warm) created before
// cutoff. Pre-started ones ran nothing of a tenant's (prewarm trims them);
// one being created or destroyed is someone else's under its lock.
func overAge(rec state.Record, cutoff time.Time) bool {
	return (rec.State == state.StateActive || rec.State == state.StateWarm) &&
		!rec.CreatedAt.IsZero() && rec.CreatedAt.Before(cutoff)
}

// expire destroys sid's incarnation if it is still over age, under its
// lock; false if it was left (locked elsewhere: the next pass looks again).
func (l *Lifetime) expire(ctx context.Context, sid, incarnation string, cutoff time.Time) (bool, error) {
	p := l.p
	return p.destroyer.destroyIfStill(ctx, p.locks, p.store, sid, incarnation, ReasonMaxLifetime,
		func(rec state.Record) bool { return overAge(rec, cutoff) },
		func(rec state.Record) {
			p.log.InfoContext(ctx, "sandbox reached max_lifetime", "sandbox_id", sid, "thread", rec.Thread,
				"age", p.clock.Now().Sub(rec.CreatedAt).Round(time.Second), "max_lifetime", p.maxLifetime)
		})
}
