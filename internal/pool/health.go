package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/state"
)

// healthConcurrency bounds the probes of one pass in flight.
const healthConcurrency = 8

// healthSpread is the tenths of the interval a pass spreads its probes
// over, leaving the rest for the last probes' answers.
const healthSpread = 8

// Health destroys a sandbox whose server stopped answering (alive but hung:
// a SIGSTOPped server, a deadlock), which would otherwise hold its thread's
// requests until they time out, for good. Every replica probes the
// sandboxes it serves (its cached routes, as the sampler measures them)
// every interval with one GET of sandboxspec.ActivityPath through the
// route's own connection pool; any HTTP answer within the timeout is
// healthy (a third-party server's 404 too: it answers), so a sandbox
// running a long command or holding a WebSocket open, whose server answers
// meanwhile, is never destroyed. After Failures probes in a row without an
// answer the sandbox is destroyed (reason failed_health) under its lock
// and the incarnation-checked claim, as the lifetime loop's destroys: of
// several replicas counting the same sandbox, one destroys it. Its
// thread's next request creates a new one; the data stays.
//
// Nothing reads Redis while probes answer. A failed probe reads the
// record: a frozen sandbox (it cannot answer, by design), a warm one or
// another incarnation is no longer this route's to judge, and the route is
// dropped (the next request reads Redis anyway).
type Health struct {
	p healthParams
	// strikes counts each sandbox's failed probes in a row, by sandbox id;
	// Pass runs one at a time.
	strikes map[string]strike
}

// strike is the failed probes in a row of one incarnation.
type strike struct {
	incarnation string
	n           int
}

type healthParams struct {
	interval, timeout time.Duration
	failures          int
	cache             *cache
	store             claimStore
	locks             locks
	destroyer         *destroyer
	log               *slog.Logger
}

func newHealth(p healthParams) *Health { return &Health{p: p, strikes: map[string]strike{}} }

// Run probes every interval until ctx ends; a negative interval disables
// it.
func (h *Health) Run(ctx context.Context) {
	if h.p.interval < 0 {
		return
	}
	every(ctx, h.p.log, "health check", h.p.interval, func(ctx context.Context) error {
		_, err := h.Pass(ctx)
		return err
	})
}

// Pass probes every sandbox this replica serves once and returns how many
// it destroyed. The probes' starts are spread evenly over most of the
// interval: at 5,000 sandboxes one burst of 5,000 probes took both cores
// for a moment every interval, and the requests arriving then waited
// behind it (bench -suite density: the sweep's p99).
func (h *Health) Pass(ctx context.Context) (int, error) {
	var routes []*Route
	h.p.cache.each(func(r *Route) {
		if !r.gone.Load() && r.url != nil {
			routes = append(routes, r)
		}
	})
	failed := make([]bool, len(routes))
	g := errgroup.Group{}
	g.SetLimit(healthConcurrency)
	began, pace := time.Now(), time.NewTimer(0)
	defer pace.Stop()
	apart := h.p.interval * healthSpread / 10 / time.Duration(max(len(routes), 1))
	for i, r := range routes {
		if wait := time.Until(began.Add(apart * time.Duration(i))); wait > 0 {
			pace.Reset(wait)
			select {
			case <-ctx.Done():
			case <-pace.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error {
			failed[i] = h.probe(ctx, r) != nil
			return nil
		})
	}
	_ = g.Wait()
	if ctx.Err() != nil {
		return 0, ctx.Err() // a probe cut short by the pass's end says nothing
	}
	served := make(map[string]bool, len(routes))
	n := 0
	var errs []error
	for i, r := range routes {
		served[r.SandboxID] = true
		if !failed[i] {
			delete(h.strikes, r.SandboxID)
			continue
		}
		done, err := h.failed(ctx, r)
		if err != nil {
			errs = append(errs, err)
		}
		if done {
			n++
		}
	}
	for sid := range h.strikes {
		if !served[sid] {
			delete(h.strikes, sid)
		}
	}
	return n, errors.Join(errs...)
}

// probe asks r's server for its activity; nil if it answered at all.
func (h *Health) probe(ctx context.Context, r *Route) error {
	ctx, cancel := context.WithTimeout(ctx, h.p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url.JoinPath(sandboxspec.ActivityPath).String(), nil)
	if err != nil {
		return fmt.Errorf("health probe: %w", err)
	}
	if len(r.key) == 1 {
		req.Header[sandboxspec.SecretHeader] = r.key
	}
	resp, err := r.transport.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("health probe: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096)) // read to its end: the connection is reused
	return resp.Body.Close()
}

// failed counts a failed probe of r and destroys its sandbox at the
// threshold; true if it did.
func (h *Health) failed(ctx context.Context, r *Route) (bool, error) {
	rec, ok, err := h.p.store.Get(ctx, r.SandboxID)
	if err != nil {
		return false, err
	}
	if !ok || !judged(rec, r.Incarnation) {
		delete(h.strikes, r.SandboxID)
		h.p.cache.dropIncarnation(r.SandboxID, r.Incarnation)
		return false, nil
	}
	s := h.strikes[r.SandboxID]
	if s.incarnation != r.Incarnation {
		s = strike{incarnation: r.Incarnation}
	}
	s.n++
	h.strikes[r.SandboxID] = s
	if s.n < h.p.failures {
		h.p.log.DebugContext(ctx, "sandbox did not answer its health probe", "sandbox_id", r.SandboxID,
			"thread", r.Thread, "failed", s.n, "health_failures", h.p.failures)
		return false, nil
	}
	done, err := h.destroy(ctx, r.SandboxID, r.Incarnation)
	if done {
		delete(h.strikes, r.SandboxID)
	}
	return done, err
}

// judged: rec is the active, running incarnation a health probe judges (a
// frozen sandbox cannot answer; a warm one's route is stale).
func judged(rec state.Record, incarnation string) bool {
	return rec.State == state.StateActive && rec.Frozen.IsZero() && rec.Incarnation == incarnation
}

// destroy destroys sid's incarnation if it is still judged, under its
// lock; false if it was left (locked elsewhere: the next pass looks again).
func (h *Health) destroy(ctx context.Context, sid, incarnation string) (bool, error) {
	p := h.p
	return p.destroyer.destroyIfStill(ctx, p.locks, p.store, sid, incarnation, ReasonFailedHealth,
		func(rec state.Record) bool { return judged(rec, incarnation) },
		func(rec state.Record) {
			p.log.WarnContext(ctx, "sandbox failed its health check", "sandbox_id", sid, "thread", rec.Thread,
				"health_failures", p.failures, "health_timeout", p.timeout)
		})
}
