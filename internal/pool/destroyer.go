package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// forgetter deletes a record and its bucket entries.
type forgetter interface {
	Forget(ctx context.Context, sid, incarnation string) (bool, error)
}

// destroyer finishes every destroy, whoever claimed the record: a client,
// an eviction, the reaper, the reconciler, the lifetime loop.
type destroyer struct {
	cache   *cache
	backend tracedBackend
	store   forgetter
	dataDir string
	metrics *telemetry.Metrics
	notes   *notifier
	log     *slog.Logger
}

// destroyClaimed destroys a claimed record's sandbox and deletes the record.
// The caller holds the sandbox's lock.
func (d *destroyer) destroyClaimed(ctx context.Context, rec state.Record, reason DestroyReason) error {
	d.cache.drop(rec.SandboxID, nil)
	if err := d.backend.destroy(ctx, rec); err != nil {
		// The record stays in state destroying; the reconciler or the next
		// acquire (under the lock) finishes the job.
		return fmt.Errorf("destroy sandbox: %w", err)
	}
	if _, err := d.store.Forget(ctx, rec.SandboxID, rec.Incarnation); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if rec.Prewarm != "" && rec.User == "" { // never claimed: its user data is nobody's
		if err := backend.RemovePrewarmDirs(d.dataDir, rec.SandboxID); err != nil {
			d.log.WarnContext(ctx, "remove prewarm dirs", "sandbox_id", rec.SandboxID, "err", err)
		}
	}
	d.metrics.Destroyed(string(reason))
	d.notes.gone(ctx, rec, string(reason))
	d.log.InfoContext(ctx, "sandbox destroyed", "sandbox_id", rec.SandboxID, "thread", rec.Thread, "reason", string(reason))
	return nil
}

// claimStore reads and claims a record for destroyIfStill.
type claimStore interface {
	Get(ctx context.Context, sid string) (state.Record, bool, error)
	Claim(ctx context.Context, sid, incarnation string) (state.Record, bool, error)
}

// destroyIfStill destroys sid's incarnation for reason, under its lock,
// if its record still is that incarnation and still says so; claimed logs
// the claim before the destroy. False if it was left: locked elsewhere,
// changed or gone (a loop's next pass looks again), or its destroy failed
// (logged; the record stays destroying for the reconciler).
func (d *destroyer) destroyIfStill(ctx context.Context, lk locks, store claimStore, sid, incarnation string,
	reason DestroyReason, still func(state.Record) bool, claimed func(state.Record)) (bool, error) {
	held, err := lk.lock(ctx, sid, 0)
	if errors.Is(err, state.ErrLocked) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer lk.unlock(held)
	cur, ok, err := store.Get(ctx, sid)
	if err != nil || !ok || cur.Incarnation != incarnation || !still(cur) {
		return false, err
	}
	rec, ok, err := store.Claim(ctx, sid, incarnation)
	if err != nil || !ok {
		return false, err
	}
	claimed(rec)
	if err := d.destroyClaimed(ctx, rec, reason); err != nil {
		d.log.WarnContext(ctx, "destroy sandbox", "sandbox_id", sid, "thread", rec.Thread, "reason", reason, "err", err)
		return false, nil
	}
	return true, nil
}
