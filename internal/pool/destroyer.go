package pool

import (
	"context"
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
