package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// locks takes and releases the per-sandbox locks (statedb.Locker) that make
// a create, a reclaim, a freeze or a destroy exactly-once across replicas.
type locks struct {
	locker *statedb.Locker
	obs    observer
	log    *slog.Logger
}

// lock takes sid's lock, waiting up to wait, inside a lock-wait span. Held
// elsewhere (ErrLocked) is an answer, not a failed span.
func (l locks) lock(ctx context.Context, sid string, wait time.Duration) (*statedb.Held, error) {
	sctx, span := l.obs.span(ctx, spanLockWait, sid, "")
	held, err := l.locker.Obtain(sctx, sid, wait)
	if span.IsRecording() {
		span.SetAttributes(attribute.Bool("obtained", err == nil))
		if !errors.Is(err, state.ErrLocked) {
			telemetry.Fail(span, err)
		}
	}
	span.End()
	return held, err
}

func (l locks) unlock(h *statedb.Held) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := h.Release(ctx); err != nil {
		l.log.Warn("release sandbox lock", "err", err)
	}
}

// lockErr maps a lock failure: held elsewhere is "provisioning", anything
// else is Redis.
func lockErr(err error) error {
	if errors.Is(err, state.ErrLocked) {
		return fmt.Errorf("%w: %w", ErrProvisioning, err)
	}
	return fmt.Errorf("%w: %w", ErrState, err)
}
