package pool

import (
	"context"
	"errors"
	"log/slog"
	"slices"
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

// Freezer stops the processes of sandboxes idle past their freeze delay
// (Config.FreezeAfter, or their template's FreezeAfter; memory kept, CPU
// zero) through the backend's Freezer; the next request on any replica
// thaws them (reuse). Every replica runs one over the buckets it holds.
//
// The activity index does not know templates, so a pass reads one window
// per distinct delay d: what went idle for d since its last look at each
// bucket (statedb.IdleSince), and freezes from it only the sandboxes whose
// delay is d. Each sandbox going idle is read once per distinct delay (a
// handful, fixed by the config), never once per pass: a pass costs
// O(delays x buckets + what went idle since the last). A sandbox found
// busy (a command running, a request in flight in it) is touched, so it
// comes back once it has been quiet for its delay again, and idle expiry
// spares it meanwhile.
type Freezer struct {
	p freezerParams
	// windows are the distinct freeze delays in use, shortest first.
	windows []time.Duration
	// mixed: sandboxes have different delays (or some never freeze), so a
	// window's sandboxes are told apart by their template before locking.
	mixed bool

	mu    sync.Mutex
	since map[time.Duration]map[int]time.Time // per window, per bucket: the cutoff of the last look
	retry map[string]struct{}                 // looked at again next pass
}

type freezerParams struct {
	// after is Config.FreezeAfter (<= 0: never), templateAfter each
	// template's delay (Templates.freezeAfters); a sandbox of no template
	// (or of one no longer configured) has after.
	after         time.Duration
	templateAfter map[string]time.Duration
	interval      time.Duration // how often a pass runs
	store         freezerStore
	held          *heldBuckets
	cache         *cache
	locks         locks
	probe         *prober
	stopper       *stopper // its Freezer nil: the backend cannot freeze
	tracer        trace.Tracer
	clock         Clock
	log           *slog.Logger
}

// freezerStore finds what went idle and marks a sandbox frozen.
type freezerStore interface {
	IdleSince(ctx context.Context, buckets []int, from map[int]time.Time, to time.Time, limit int64) ([][]state.Idle, error)
	Get(ctx context.Context, sid string) (state.Record, bool, error)
	Freeze(ctx context.Context, sid, incarnation string, cutoff, now time.Time) (bool, error)
}

func newFreezer(p freezerParams) *Freezer {
	f := &Freezer{p: p, since: map[time.Duration]map[int]time.Time{}, retry: map[string]struct{}{}}
	delays := []time.Duration{p.after}
	for _, d := range p.templateAfter {
		delays = append(delays, d)
	}
	for _, d := range delays {
		if d > 0 && !slices.Contains(f.windows, d) {
			f.windows = append(f.windows, d)
			f.since[d] = map[int]time.Time{}
		}
		f.mixed = f.mixed || d != delays[0]
	}
	slices.Sort(f.windows)
	return f
}

// Run freezes idle sandboxes every freezeInterval until ctx ends; a no-op
// without a freeze delay or with a backend that cannot pause.
func (f *Freezer) Run(ctx context.Context) {
	if !f.on() {
		return
	}
	every(ctx, f.p.log, "freezer", f.p.interval, func(ctx context.Context) error {
		_, err := f.Pass(ctx)
		return err
	})
}

// candidate is a sandbox a pass looks at: read in window (0: a retry,
// whatever its delay).
type candidate struct {
	sid    string
	window time.Duration
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
	now := p.clock.Now()
	buckets := p.held.mine()
	f.mu.Lock()
	// Every window is read before any cursor moves: a failed read loses
	// nothing.
	idle := make([][][]state.Idle, len(f.windows))
	for i, w := range f.windows {
		if idle[i], err = p.store.IdleSince(ctx, buckets, f.since[w], now.Add(-w), freezeBatch); err != nil {
			f.mu.Unlock()
			return 0, err
		}
	}
	todo := make([]candidate, 0, len(f.retry))
	for sid := range f.retry {
		todo = append(todo, candidate{sid: sid})
	}
	clear(f.retry)
	for i, w := range f.windows {
		since := f.since[w]
		for j, b := range buckets {
			list := idle[i][j]
			since[b] = now.Add(-w)
			if len(list) == freezeBatch { // more to read: go on from here next pass
				last := list[len(list)-1].Seen
				since[b] = last
				if list[0].Seen.Before(last) { // ties with the last are read again
					since[b] = last.Add(-time.Millisecond)
				}
			}
			for _, e := range list {
				todo = append(todo, candidate{sid: e.SandboxID, window: w})
			}
		}
	}
	f.mu.Unlock()

	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(freezeConcurrency)
	for _, c := range todo {
		g.Go(func() error {
			done, err := f.freezeIdle(gctx, c, now)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				p.log.WarnContext(gctx, "freeze idle sandbox", "sandbox_id", c.sid, "err", err)
				f.again(c.sid)
			case done == freezeRetry:
				f.again(c.sid)
			case done == freezeDone:
				frozen++
			}
			return nil
		})
	}
	_ = g.Wait()
	return frozen, ctx.Err()
}

// afterOf is the freeze delay of a sandbox of template name (<= 0: never).
func (p freezerParams) afterOf(name string) time.Duration {
	if d, ok := p.templateAfter[name]; ok {
		return d
	}
	return p.after
}

// on: a freeze delay is set and the backend can freeze.
func (f *Freezer) on() bool { return len(f.windows) > 0 && f.p.stopper.pz != nil }

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

// freezeIdle freezes c's sandbox if it is still active, unused for its
// freeze delay before now and not busy, under its lock.
func (f *Freezer) freezeIdle(ctx context.Context, c candidate, now time.Time) (freezeResult, error) {
	p := f.p
	// A request in flight here: the toucher renews it.
	if p.cache.serving(c.sid) {
		return freezeSkip, nil
	}
	// Read in another delay's window: its own window has it (a sandbox's
	// template never changes), so it is left without taking its lock.
	if f.mixed && c.window > 0 {
		rec, ok, err := p.store.Get(ctx, c.sid)
		if err != nil || !ok || p.afterOf(rec.Template) != c.window {
			return freezeSkip, err
		}
	}
	held, err := p.locks.lock(ctx, c.sid, 0)
	if errors.Is(err, state.ErrLocked) {
		return freezeRetry, nil
	}
	if err != nil {
		return freezeSkip, err
	}
	defer p.locks.unlock(held)
	rec, ok, err := p.store.Get(ctx, c.sid)
	if err != nil || !ok || rec.State != state.StateActive || !rec.Frozen.IsZero() {
		return freezeSkip, err
	}
	after := p.afterOf(rec.Template)
	if after <= 0 {
		return freezeSkip, nil
	}
	if err := f.freezeMarked(ctx, rec, now.Add(-after)); err != nil {
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
