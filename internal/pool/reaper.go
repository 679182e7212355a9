package pool

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/telemetry"
)

const (
	reapBatch       = 100
	reapConcurrency = 4
)

// Reaper destroys sandboxes idle past IdleTimeout: active ones untouched that
// long, warm ones that long after release. Every replica runs one; the lock
// plus the claim script make exactly one replica destroy each sandbox, and
// the bucket leases split the buckets between replicas. A pass counts what
// is expired in each of its buckets' indexes (one round trip per node),
// then reads only those expired ranges: O(buckets + expired), not O(pool).
type Reaper struct {
	p reaperParams
	// shortest is the shortest idle timeout any sandbox has (the fleet's
	// or a template's); negative when none expires.
	shortest time.Duration
}

type reaperParams struct {
	idleTimeout, interval time.Duration
	// templateIdle is the idle timeout of each template's sandboxes
	// (Templates.idleTimeouts); a sandbox of none has idleTimeout.
	templateIdle map[string]time.Duration
	store        reaperStore
	held         *heldBuckets
	cache        *cache
	locks        locks
	probe        *prober
	destroyer    *destroyer
	metrics      *telemetry.Metrics
	tracer       trace.Tracer
	clock        Clock
	log          *slog.Logger
}

// reaperStore finds expired sandboxes and claims them.
type reaperStore interface {
	Due(ctx context.Context, buckets []int, cutoff time.Time) ([]state.Due, error)
	Expired(ctx context.Context, b int, index state.Index, cutoff time.Time, limit int64) ([]string, error)
	Get(ctx context.Context, sid string) (state.Record, bool, error)
	ClaimExpired(ctx context.Context, sid string, index state.Index, cutoff, now time.Time) (state.Record, bool, error)
}

func newReaper(p reaperParams) *Reaper {
	shortest := p.idleTimeout
	for _, d := range p.templateIdle {
		if d >= 0 && (shortest < 0 || d < shortest) {
			shortest = d
		}
	}
	return &Reaper{p: p, shortest: shortest}
}

// Run reaps every ReapInterval until ctx ends; an idle_timeout < 0 of the
// fleet and every template disables it.
func (r *Reaper) Run(ctx context.Context) {
	if r.shortest < 0 {
		return
	}
	every(ctx, r.p.log, "reaper", r.p.interval, func(ctx context.Context) error {
		_, err := r.Pass(ctx)
		return err
	})
}

// Pass reaps what is expired now and returns how many sandboxes it destroyed.
func (r *Reaper) Pass(ctx context.Context) (n int, err error) {
	p := r.p
	if r.shortest < 0 {
		return 0, nil
	}
	ctx, span := telemetry.Root(ctx, p.tracer, spanReapPass)
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("reaped", n))
		}
		end(span, err)
	}()
	// Read with the shortest timeout; each sandbox is then held to its own
	// (reap), so one of a longer timeout stays.
	cutoff := p.clock.Now().Add(-r.shortest)
	due, err := p.store.Due(ctx, p.held.mine(), cutoff)
	if err != nil {
		return 0, err
	}
	var reaped atomic.Int64
	for _, d := range due {
		if err := r.reapIndex(ctx, d.Bucket, d.Index, cutoff, &reaped); err != nil {
			return int(reaped.Load()), err
		}
	}
	return int(reaped.Load()), nil
}

// reapIndex reaps what is expired in bucket b's index.
func (r *Reaper) reapIndex(ctx context.Context, b int, index state.Index, cutoff time.Time, reaped *atomic.Int64) error {
	p := r.p
	// Ids skipped (locked, in flight here) stay in the index, so read past them.
	var offset int64
	for {
		ids, err := p.store.Expired(ctx, b, index, cutoff, offset+reapBatch)
		if err != nil {
			return err
		}
		batch := ids[min(int(offset), len(ids)):]
		var kept atomic.Int64
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(reapConcurrency)
		for _, sid := range batch {
			g.Go(func() error {
				done, err := r.reap(gctx, sid, index, cutoff)
				if done {
					reaped.Add(1)
				} else {
					kept.Add(1)
				}
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		if int64(len(batch)) < reapBatch {
			return nil
		}
		offset += kept.Load()
	}
}

// reap destroys sid if it is still expired in index; false if it was left.
func (r *Reaper) reap(ctx context.Context, sid string, index state.Index, cutoff time.Time) (bool, error) {
	p := r.p
	// A request in flight on this replica: the next touch flush renews it.
	if p.cache.serving(sid) {
		return false, nil
	}
	held, err := p.locks.lock(ctx, sid, 0)
	if errors.Is(err, state.ErrLocked) {
		return false, nil // being created, reclaimed or reaped elsewhere
	}
	if err != nil {
		return false, err
	}
	defer p.locks.unlock(held)
	cur, ok, err := p.store.Get(ctx, sid)
	if err != nil || !ok {
		return false, err
	}
	if idle := p.idleOf(cur.Template); idle != r.shortest {
		if idle < 0 {
			return false, nil
		}
		cutoff = p.clock.Now().Add(-idle)
	}
	// A command running in it (an async exec, a background job the API
	// started) is no idleness: asked first, it is spared and renewed.
	if index == state.IndexActive && p.probe.spareRunning(ctx, cur) {
		return false, nil
	}
	rec, ok, err := p.store.ClaimExpired(ctx, sid, index, cutoff, p.clock.Now())
	if err != nil || !ok {
		return false, err
	}
	reason := "idle_active"
	if index == state.IndexWarm {
		reason = "idle_warm"
	}
	p.metrics.ReaperClaimed(reason)
	if err := p.destroyer.destroyClaimed(ctx, rec, ReasonIdle); err != nil {
		p.log.WarnContext(ctx, "reap", "sandbox_id", sid, "thread", rec.Thread, "err", err)
		return false, nil
	}
	return true, nil
}

// idleOf is the idle timeout of a sandbox of template name.
func (p reaperParams) idleOf(name string) time.Duration {
	if d, ok := p.templateIdle[name]; ok {
		return d
	}
	return p.idleTimeout
}
