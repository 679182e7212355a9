package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/sync/errgroup"

	"github.com/sandgate/sandgate/internal/backend"
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
// kept, CPU zero) through the backend's Pauser; the next request on any
// replica thaws them (reuse). Every replica runs one over the buckets it
// holds. A pass reads only what went idle since its last look at each
// bucket (statedb.IdleSince); a sandbox found busy (a command running, a
// request in flight in it) is touched, so it comes back once it has been
// quiet for FreezeAfter again, and idle expiry spares it meanwhile.
type Freezer struct {
	p  *Pool
	pz backend.Pauser

	mu    sync.Mutex
	since map[int]time.Time   // per bucket: the cutoff of the last look
	retry map[string]struct{} // looked at again next pass
}

// NewFreezer returns the freezer of p.
func NewFreezer(p *Pool) *Freezer {
	pz, _ := p.backend.(backend.Pauser)
	return &Freezer{p: p, pz: pz, since: map[int]time.Time{}, retry: map[string]struct{}{}}
}

// Run freezes idle sandboxes every freezeInterval until ctx ends; a no-op
// without FreezeAfter or with a backend that cannot pause.
func (f *Freezer) Run(ctx context.Context) {
	if f.p.cfg.FreezeAfter <= 0 || f.pz == nil {
		return
	}
	every(ctx, f.p.log, "freezer", f.p.cfg.freezeInterval(), func(ctx context.Context) error {
		_, err := f.Pass(ctx)
		return err
	})
}

// Pass freezes what is idle now and returns how many sandboxes it froze.
func (f *Freezer) Pass(ctx context.Context) (frozen int, err error) {
	p := f.p
	if p.cfg.FreezeAfter <= 0 || f.pz == nil {
		return 0, nil
	}
	ctx, span := telemetry.Root(ctx, p.tracer, spanFreezePass)
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("frozen", frozen))
		}
		end(span, err)
	}()
	cutoff := p.clock.Now().Add(-p.cfg.FreezeAfter)
	buckets := p.buckets()
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
			done, err := p.freezeIdle(gctx, f.pz, sid, cutoff)
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

// ErrBusy: the sandbox runs a command or serves a request, so it is
// neither frozen nor restored under it (409).
var ErrBusy = errors.New("sandbox is busy")

// freezeIdle freezes sid if it is still active, unused since cutoff and
// not busy, under its lock.
func (p *Pool) freezeIdle(ctx context.Context, pz backend.Pauser, sid string, cutoff time.Time) (freezeResult, error) {
	// A request in flight here: the toucher renews it.
	if p.servingHere(sid) {
		return freezeSkip, nil
	}
	held, err := p.lock(ctx, sid, 0)
	if errors.Is(err, state.ErrLocked) {
		return freezeRetry, nil
	}
	if err != nil {
		return freezeSkip, err
	}
	defer p.unlock(held)
	rec, ok, err := p.store.Get(ctx, sid)
	if err != nil || !ok || rec.State != state.StateActive || !rec.Frozen.IsZero() {
		return freezeSkip, err
	}
	if err := p.freezeMarked(ctx, pz, rec, cutoff); err != nil {
		if errors.Is(err, ErrBusy) || errors.Is(err, errActivated) {
			return freezeSkip, nil
		}
		return freezeSkip, err
	}
	return freezeDone, nil
}

// errActivated: the record was routed to after the freeze cutoff.
var errActivated = errors.New("sandbox was used after the freeze cutoff")

// freezeMarked marks rec frozen if nothing activated it after cutoff, then
// stops it (stopMarked). Hold the lock.
func (p *Pool) freezeMarked(ctx context.Context, pz backend.Pauser, rec state.Record, cutoff time.Time) error {
	// Asked before the mark, so a busy sandbox is never shown frozen, not
	// even for the length of the probe.
	if running, err := p.busy(ctx, rec); err != nil {
		if running {
			p.renew(ctx, rec)
		}
		return err
	}
	marked, err := p.store.Freeze(ctx, rec.SandboxID, rec.Incarnation, cutoff, p.clock.Now())
	if err != nil || !marked {
		return cmpErr(err, errActivated)
	}
	return p.stopMarked(ctx, pz, rec, cutoff, false)
}

// stopMarked checks that nothing touched the marked rec since cutoff and,
// with probe, that it runs nothing (the idle path asked before marking),
// then freezes its processes; on any refusal or failure the mark is
// cleared. Hold the lock.
func (p *Pool) stopMarked(ctx context.Context, pz backend.Pauser, rec state.Record, cutoff time.Time, probe bool) (err error) {
	sid := rec.SandboxID
	defer func() {
		if err != nil {
			if _, uerr := p.store.Thaw(context.WithoutCancel(ctx), sid, rec.Incarnation); uerr != nil {
				p.log.WarnContext(ctx, "clear freeze mark", "sandbox_id", sid, "err", uerr)
			}
		}
	}()
	// The activity score is the other half of idle: a request in flight on
	// any replica is touched every touch_interval.
	seen, ok, err := p.store.Activity(ctx, sid)
	if err != nil {
		return err
	}
	if !ok || seen.After(cutoff) {
		return errActivated
	}
	if probe {
		if running, err := p.busy(ctx, rec); err != nil {
			if running {
				p.renew(ctx, rec)
			}
			return err
		}
	}
	sctx, span := p.span(ctx, spanFreeze, sid, rec.Thread)
	err = pz.Pause(sctx, rec.Info())
	end(span, err)
	if err != nil {
		return fmt.Errorf("%w: freeze sandbox: %w", backend.ErrUnavailable, err)
	}
	p.cache.drop(sid, nil)
	p.log.InfoContext(ctx, "sandbox frozen", "sandbox_id", sid, "thread", rec.Thread)
	return nil
}

// cmpErr is err, or dflt when err is nil.
func cmpErr(err, dflt error) error {
	if err != nil {
		return err
	}
	return dflt
}

// thaw runs a frozen (or paused warm) sandbox's processes again and clears
// its freeze mark. Hold the lock.
func (p *Pool) thaw(ctx context.Context, rec state.Record) error {
	pz, ok := p.backend.(backend.Pauser)
	if !ok {
		return fmt.Errorf("%w: backend %s cannot thaw sandbox %s", backend.ErrUnavailable, p.name, rec.SandboxID)
	}
	sctx, span := p.span(ctx, spanResume, rec.SandboxID, rec.Thread)
	err := pz.Resume(sctx, rec.Info())
	end(span, err)
	if err != nil {
		return fmt.Errorf("%w: thaw sandbox: %w", backend.ErrUnavailable, err)
	}
	if rec.Frozen.IsZero() {
		return nil
	}
	if _, err := p.store.Thaw(ctx, rec.SandboxID, rec.Incarnation); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	p.log.DebugContext(ctx, "sandbox thawed", "sandbox_id", rec.SandboxID, "thread", rec.Thread,
		"frozen_for", p.clock.Now().Sub(rec.Frozen).Round(time.Millisecond))
	return nil
}
