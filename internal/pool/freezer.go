package pool

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/telemetry"
)

const (
	freezeBatch       = 100
	freezeConcurrency = 4
	// freezeRetryMax bounds the ids a replica keeps to look at again (a
	// sandbox locked elsewhere, a failed freeze) between passes.
	freezeRetryMax = 10_000
)

// Freezer stops the processes of sandboxes idle past FreezeAfter (memory
// kept, CPU zero) through the backend's Freezer; the next request on any
// replica thaws them (reuse). Every replica runs one over the buckets it
// holds. A pass reads only what went idle since its last look at each
// bucket (statedb.IdleSince); a sandbox found busy (a command running, a
// request in flight in it) is touched, so it comes back once it has been
// quiet for FreezeAfter again, and idle expiry spares it meanwhile.
type Freezer struct {
	p freezerParams

	mu    sync.Mutex
	since map[int]time.Time   // per bucket: the cutoff of the last look
	retry map[string]struct{} // looked at again next pass
}

type freezerParams struct {
	after, interval time.Duration // Config.FreezeAfter, how often a pass runs
	store           freezerStore
	held            *heldBuckets
	cache           *cache
	locks           locks
	probe           *prober
	stopper         *stopper // its Freezer nil: the backend cannot freeze
	tracer          trace.Tracer
	clock           Clock
	log             *slog.Logger
}

// freezerStore finds what went idle and marks a sandbox frozen.
type freezerStore interface {
	IdleSince(ctx context.Context, buckets []int, from map[int]time.Time, to time.Time, limit int64) ([][]state.Idle, error)
	Get(ctx context.Context, sid string) (state.Record, bool, error)
	Freeze(ctx context.Context, sid, incarnation string, cutoff, now time.Time) (bool, error)
}

func newFreezer(p freezerParams) *Freezer {
	return &Freezer{p: p, since: map[int]time.Time{}, retry: map[string]struct{}{}}
}

// Run freezes idle sandboxes every freezeInterval until ctx ends; a no-op
// without FreezeAfter or with a backend that cannot pause.
func (f *Freezer) Run(ctx context.Context) {
	if !f.on() {
		return
	}
	every(ctx, f.p.log, "freezer", f.p.interval, func(ctx context.Context) error {
		_, err := f.Pass(ctx)
		return err
	})
}

// Pass freezes what is idle now and returns how many sandboxes it froze.
func (f *Freezer) Pass(ctx context.Context) (frozen int, err error) {
	p := f.p
	if !f.on() {
		return 0, nil
	}
	ctx, span := telemetry.Root(ctx, p.tracer, spanFreezePass)
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("frozen", frozen))
		}
		end(span, err)
	}()
	cutoff := p.clock.Now().Add(-p.after)
	buckets := p.held.mine()
	f.mu.Lock()
	idle, err := p.store.IdleSince(ctx, buckets, f.since, cutoff, freezeBatch)
	if err != nil {
		f.mu.Unlock()
		return 0, err
	}
	todo := make([]string, 0, len(f.retry))
	for sid := range f.retry {
		todo = append(todo, sid)
	}
	clear(f.retry)
	for i, b := range buckets {
		list := idle[i]
		f.since[b] = cutoff
		if len(list) == freezeBatch { // more to read: go on from here next pass
			last := list[len(list)-1].Seen
			f.since[b] = last
			if list[0].Seen.Before(last) { // ties with the last are read again
				f.since[b] = last.Add(-time.Millisecond)
			}
		}
		for _, e := range list {
			todo = append(todo, e.SandboxID)
		}
	}
	f.mu.Unlock()

	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(freezeConcurrency)
	for _, sid := range todo {
		g.Go(func() error {
			done, err := f.freezeIdle(gctx, sid, cutoff)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				p.log.WarnContext(gctx, "freeze idle sandbox", "sandbox_id", sid, "err", err)
				f.again(sid)
			case done == freezeRetry:
				f.again(sid)
			case done == freezeDone:
				frozen++
			}
			return nil
		})
	}
	_ = g.Wait()
	return frozen, ctx.Err()
}

// on: a freeze delay is set and the backend can freeze.
func (f *Freezer) on() bool { return f.p.after > 0 && f.p.stopper.pz != nil }

func (f *Freezer) again(sid string) {
	f.mu.Lock()
	if len(f.retry) < freezeRetryMax {
		f.retry[sid] = struct{}{}
	}
	f.mu.Unlock()
}

type freezeResult int

const (
	freezeSkip  freezeResult = iota // not idle, busy, gone or frozen already
	freezeRetry                     // locked elsewhere: look again next pass
	freezeDone
)

// freezeIdle freezes sid if it is still active, unused since cutoff and
// not busy, under its lock.
func (f *Freezer) freezeIdle(ctx context.Context, sid string, cutoff time.Time) (freezeResult, error) {
	p := f.p
	// A request in flight here: the toucher renews it.
	if p.cache.serving(sid) {
		return freezeSkip, nil
	}
	held, err := p.locks.lock(ctx, sid, 0)
	if errors.Is(err, state.ErrLocked) {
		return freezeRetry, nil
	}
	if err != nil {
		return freezeSkip, err
	}
	defer p.locks.unlock(held)
	rec, ok, err := p.store.Get(ctx, sid)
	if err != nil || !ok || rec.State != state.StateActive || !rec.Frozen.IsZero() {
		return freezeSkip, err
	}
	if err := f.freezeMarked(ctx, rec, cutoff); err != nil {
		if errors.Is(err, ErrBusy) || errors.Is(err, errActivated) {
			return freezeSkip, nil
		}
		return freezeSkip, err
	}
	return freezeDone, nil
}

// freezeMarked marks rec frozen if nothing activated it after cutoff, then
// stops it (stopMarked). Hold the lock.
func (f *Freezer) freezeMarked(ctx context.Context, rec state.Record, cutoff time.Time) error {
	p := f.p
	// Asked before the mark, so a busy sandbox is never shown frozen, not
	// even for the length of the probe.
	if running, err := p.probe.busy(ctx, rec); err != nil {
		if running {
			p.probe.renew(ctx, rec)
		}
		return err
	}
	marked, err := p.store.Freeze(ctx, rec.SandboxID, rec.Incarnation, cutoff, p.clock.Now())
	if err != nil || !marked {
		return cmpErr(err, errActivated)
	}
	return p.stopper.stopMarked(ctx, rec, cutoff, false)
}
