package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// Reconciler makes Redis and the backend agree, for the buckets this
// replica holds (BucketLeases). A live managed sandbox with no record,
// older than ReconcileGrace, is adopted into the warm pool under its
// labelled identity (so a Redis flush or restart loses no sandbox and a
// later acquire makes no duplicate); a record whose sandbox is gone is
// dropped; a destroy interrupted by a crashed replica is finished; what a
// replica dying between the steps of a change left in the bucket is
// repaired (statedb.Store.Repair), and the bucket's count reported again.
type Reconciler struct{ p reconcilerParams }

type reconcilerParams struct {
	interval, grace time.Duration // Config.ReconcileInterval, ReconcileGrace
	// adoptBefore: a sandbox created before it is adopted without the
	// grace (Config.Solo: the pool's start; zero: never).
	adoptBefore time.Time
	dryRun      bool
	fleet       string
	backendName string
	backend     tracedBackend
	// resume thaws an adopted sandbox (nil: the backend cannot pause, or
	// warm sandboxes are paused anyway).
	resume    backend.Freezer
	store     reconcilerStore
	held      *heldBuckets
	cache     *cache
	locks     locks
	destroyer *destroyer
	notes     *notifier
	metrics   *telemetry.Metrics
	tracer    trace.Tracer
	clock     Clock
	log       *slog.Logger
}

// reconcilerStore reads and repairs the buckets' records and indexes, and
// records an adopted sandbox.
type reconcilerStore interface {
	bucketRecorder
	forgetter
	Keys() statedb.Keys
	Inconsistent(ctx context.Context, buckets []int, now time.Time, grace time.Duration) ([]string, error)
	Repair(ctx context.Context, sid string, now time.Time) (bool, error)
	SyncCounts(ctx context.Context, buckets []int) error
	PutWarm(ctx context.Context, rec state.Record, now time.Time) (bool, error)
	PutPrewarm(ctx context.Context, rec state.Record, now time.Time) (bool, error)
}

func newReconciler(p reconcilerParams) *Reconciler { return &Reconciler{p: p} }

// ReconcileReport counts what one pass did (or would do, in dry-run mode).
type ReconcileReport struct {
	Adopted, Dropped, Finished, Skipped, Repaired int
}

// Run reconciles every ReconcileInterval until ctx ends (negative: never).
func (r *Reconciler) Run(ctx context.Context) {
	if r.p.interval < 0 {
		return
	}
	every(ctx, r.p.log, "reconciler", r.p.interval, func(ctx context.Context) error {
		_, err := r.Pass(ctx)
		return err
	})
}

// Pass runs one reconciliation.
func (r *Reconciler) Pass(ctx context.Context) (rep ReconcileReport, err error) {
	p := r.p
	ctx, span := telemetry.Root(ctx, p.tracer, spanReconcile)
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("adopted", rep.Adopted), attribute.Int("dropped", rep.Dropped),
				attribute.Int("finished", rep.Finished), attribute.Int("skipped", rep.Skipped),
				attribute.Bool("dry_run", p.dryRun))
		}
		if !p.dryRun {
			p.metrics.Reconciled(rep.Adopted, rep.Dropped, rep.Finished, rep.Skipped)
		}
		end(span, err)
	}()
	buckets := p.held.mine()
	mine := make(map[int]bool, len(buckets))
	for _, b := range buckets {
		mine[b] = true
	}
	now := p.clock.Now()
	if err := r.repair(ctx, buckets, now, &rep); err != nil {
		return rep, err
	}
	live, records, err := bothSides(ctx, p.backend.be, p.store, buckets)
	if err != nil {
		return rep, err
	}
	known := make(map[string]state.Record, len(records))
	for _, rec := range records {
		known[rec.SandboxID] = rec
	}
	running := make(map[string]bool, len(live))
	for _, info := range live {
		if f, ok := info.Labels[backend.LabelFleet]; ok && f != p.fleet {
			continue // another fleet's on the same engine: theirs to reconcile (unlabelled: as before the label)
		}
		if !mine[p.store.Keys().Bucket(info.SandboxID)] {
			continue // another replica's bucket
		}
		running[info.SandboxID] = true
		if _, ok := known[info.SandboxID]; ok {
			continue
		}
		if age := now.Sub(info.CreatedAt); age < p.grace && !info.CreatedAt.Before(p.adoptBefore) {
			rep.Skipped++ // a create may be about to write its record
			continue
		}
		switch err := r.adopt(ctx, info); {
		case err == nil:
			rep.Adopted++
		case errors.Is(err, errSkip):
			rep.Skipped++
		default:
			return rep, err
		}
	}
	for _, rec := range records {
		if running[rec.SandboxID] && rec.State != state.StateDestroying {
			continue
		}
		switch err := r.settle(ctx, rec); {
		case err == nil && rec.State == state.StateDestroying:
			rep.Finished++
		case err == nil:
			rep.Dropped++
		case errors.Is(err, errSkip):
			rep.Skipped++
		default:
			return rep, err
		}
	}
	if rep != (ReconcileReport{}) {
		p.log.InfoContext(ctx, "reconciled", "dry_run", p.dryRun, "adopted", rep.Adopted,
			"dropped", rep.Dropped, "finished", rep.Finished, "skipped", rep.Skipped, "repaired", rep.Repaired)
	}
	return rep, nil
}

// errSkip: left for the next pass (locked, or not ours to judge).
var errSkip = errors.New("skipped")

// adopt records a running sandbox without a record as warm, or an unclaimed
// pre-started one back into the prewarm index (the refill trims a surplus).
func (r *Reconciler) adopt(ctx context.Context, info backend.Info) error {
	p := r.p
	st, put, into := state.StateWarm, p.store.PutWarm, "warm pool"
	if info.User == "" && info.Labels[backend.LabelPrewarm] != "" {
		// No thread yet, so no identity to check against its id.
		st, put, into = state.StatePrewarm, p.store.PutPrewarm, "prewarm pool"
	} else {
		user, thread := info.User, info.Thread
		if user == "" {
			user, thread = info.Labels[backend.LabelUser], info.Labels[backend.LabelThread]
		}
		// The identity must reproduce the id, or this is not a sandbox we made.
		if identity.ValidUser(user) != nil || identity.ValidThread(thread) != nil || identity.SandboxID(user, thread) != info.SandboxID {
			p.log.WarnContext(ctx, "reconciler: managed sandbox with an inconsistent identity; left alone",
				"sandbox_id", info.SandboxID, "thread", thread)
			return errSkip
		}
		info.User, info.Thread = user, thread
	}
	if p.dryRun {
		p.log.InfoContext(ctx, "reconciler (dry run): would adopt into the "+into, "sandbox_id", info.SandboxID, "thread", info.Thread)
		return nil
	}
	held, err := p.locks.lock(ctx, info.SandboxID, 0)
	if errors.Is(err, state.ErrLocked) {
		return errSkip // being created, claimed or destroyed
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	defer p.locks.unlock(held)
	if info.Backend == "" {
		info.Backend = p.backendName
	}
	// One frozen before its record was lost would be handed out frozen:
	// the warm pool's sandboxes run (or, with pause_warm, are resumed on
	// reclaim anyway).
	if p.resume != nil {
		if err := p.resume.Thaw(ctx, info); err != nil {
			return fmt.Errorf("%w: resume adopted sandbox: %w", backend.ErrUnavailable, err)
		}
	}
	wrote, err := put(ctx, state.RecordFromInfo(info, st), p.clock.Now())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if !wrote {
		return errSkip // recorded meanwhile
	}
	p.metrics.Adopted("reconciler")
	p.log.InfoContext(ctx, "reconciler: adopted a sandbox without a record into the "+into,
		"sandbox_id", info.SandboxID, "thread", info.Thread)
	return nil
}

// settle drops a record whose sandbox is gone, or finishes an interrupted
// destroy. Liveness is confirmed through Alive first: a List that missed a
// sandbox must not cost it its record.
func (r *Reconciler) settle(ctx context.Context, rec state.Record) error {
	p := r.p
	held, err := p.locks.lock(ctx, rec.SandboxID, 0)
	if errors.Is(err, state.ErrLocked) {
		return errSkip // being created or destroyed right now
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	defer p.locks.unlock(held)
	if rec.State == state.StateDestroying {
		if p.dryRun {
			p.log.InfoContext(ctx, "reconciler (dry run): would finish an interrupted destroy", "sandbox_id", rec.SandboxID)
			return nil
		}
		return p.destroyer.destroyClaimed(ctx, rec, ReasonInterrupted)
	}
	alive, err := p.backend.alive(ctx, rec)
	if err != nil {
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	if alive {
		return errSkip
	}
	if p.dryRun {
		p.log.InfoContext(ctx, "reconciler (dry run): would drop the record of a vanished sandbox", "sandbox_id", rec.SandboxID)
		return nil
	}
	if _, err := p.store.Forget(ctx, rec.SandboxID, rec.Incarnation); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	p.cache.drop(rec.SandboxID, nil)
	p.notes.gone(ctx, rec, ReasonVanished)
	p.log.InfoContext(ctx, "reconciler: dropped the record of a vanished sandbox", "sandbox_id", rec.SandboxID, "thread", rec.Thread)
	return nil
}

// repair puts right what a replica dying between the steps of a change
// left in buckets, each sandbox under its lock, then reports the buckets'
// counts to the fleet.
func (r *Reconciler) repair(ctx context.Context, buckets []int, now time.Time, rep *ReconcileReport) error {
	p := r.p
	bad, err := p.store.Inconsistent(ctx, buckets, now, p.grace)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	for _, sid := range bad {
		if p.dryRun {
			p.log.InfoContext(ctx, "reconciler (dry run): would repair the bucket entries of a sandbox", "sandbox_id", sid)
			continue
		}
		held, err := p.locks.lock(ctx, sid, 0)
		if errors.Is(err, state.ErrLocked) {
			rep.Skipped++ // being created or destroyed: judged next pass
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrState, err)
		}
		recorded, err := p.store.Repair(ctx, sid, now)
		p.locks.unlock(held)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrState, err)
		}
		rep.Repaired++
		p.log.InfoContext(ctx, "reconciler: repaired the bucket entries of a sandbox", "sandbox_id", sid, "recorded", recorded)
	}
	if p.dryRun {
		return nil
	}
	if err := p.store.SyncCounts(ctx, buckets); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	return nil
}
