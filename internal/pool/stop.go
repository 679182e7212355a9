package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/state"
)

// errActivated: the record was routed to after the freeze cutoff.
var errActivated = errors.New("sandbox was used after the freeze cutoff")

// stopper stops and restarts a sandbox's processes, keeping its record's
// freeze mark in step: the freezer, FreezeThread and Hold stop sandboxes,
// an acquire and Hold thaw them. Every method wants the sandbox's lock held.
type stopper struct {
	pz      backend.Freezer // nil: the backend cannot stop a sandbox
	backend string
	store   stopStore
	cache   *cache
	probe   *prober
	obs     observer
	clock   Clock
	notes   *notifier
	log     *slog.Logger
}

// stopStore reads a sandbox's activity and clears its freeze mark.
type stopStore interface {
	Activity(ctx context.Context, sid string) (time.Time, bool, error)
	Thaw(ctx context.Context, sid, incarnation string) (bool, error)
}

// stopMarked checks that nothing touched the marked rec since cutoff and,
// with probe, that it runs nothing (the idle path asked before marking),
// then freezes its processes; on any refusal or failure the mark is
// cleared. The backend must be able to pause.
func (s *stopper) stopMarked(ctx context.Context, rec state.Record, cutoff time.Time, probe bool) (err error) {
	sid := rec.SandboxID
	defer func() {
		if err != nil {
			if _, uerr := s.store.Thaw(context.WithoutCancel(ctx), sid, rec.Incarnation); uerr != nil {
				s.log.WarnContext(ctx, "clear freeze mark", "sandbox_id", sid, "err", uerr)
			}
		}
	}()
	// The activity score is the other half of idle: a request in flight on
	// any replica is touched every touch_interval.
	seen, ok, err := s.store.Activity(ctx, sid)
	if err != nil {
		return err
	}
	if !ok || seen.After(cutoff) {
		return errActivated
	}
	if probe {
		if running, err := s.probe.busy(ctx, rec); err != nil {
			if running {
				s.probe.renew(ctx, rec)
			}
			return err
		}
	}
	sctx, span := s.obs.span(ctx, spanFreeze, sid, rec.Thread)
	err = s.pz.Freeze(sctx, rec.Info())
	end(span, err)
	if err != nil {
		return fmt.Errorf("%w: freeze sandbox: %w", backend.ErrUnavailable, err)
	}
	s.cache.drop(sid, nil)
	s.log.InfoContext(ctx, "sandbox frozen", "sandbox_id", sid, "thread", rec.Thread)
	cause := CauseIdle // the freezer probed before marking; FreezeThread probes here
	if probe {
		cause = CauseOnDemand
	}
	s.notes.about(ctx, events.Frozen, rec, cause)
	return nil
}

// thaw runs a frozen (or paused warm) sandbox's processes again and clears
// its freeze mark.
func (s *stopper) thaw(ctx context.Context, rec state.Record) error {
	if s.pz == nil {
		return fmt.Errorf("%w: backend %s cannot thaw sandbox %s", backend.ErrUnavailable, s.backend, rec.SandboxID)
	}
	sctx, span := s.obs.span(ctx, spanResume, rec.SandboxID, rec.Thread)
	err := s.pz.Thaw(sctx, rec.Info())
	end(span, err)
	if err != nil {
		return fmt.Errorf("%w: thaw sandbox: %w", backend.ErrUnavailable, err)
	}
	if rec.Frozen.IsZero() {
		return nil
	}
	if _, err := s.store.Thaw(ctx, rec.SandboxID, rec.Incarnation); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	s.log.DebugContext(ctx, "sandbox thawed", "sandbox_id", rec.SandboxID, "thread", rec.Thread,
		"frozen_for", s.clock.Now().Sub(rec.Frozen).Round(time.Millisecond))
	s.notes.about(ctx, events.Thawed, rec, CauseOnDemand)
	return nil
}

// cmpErr is err, or dflt when err is nil.
func cmpErr(err, dflt error) error {
	if err != nil {
		return err
	}
	return dflt
}
