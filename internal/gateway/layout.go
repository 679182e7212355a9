package gateway

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/internal/statedb"
)

// layoutGate migrates Redis to the key layout this code uses before the
// gateway reports ready (statedb.Store.Migrate). Redis unreachable at start
// is retried in the background; a layout this configuration cannot use
// stops the start.
type layoutGate struct {
	store *statedb.Store
	log   *slog.Logger
	done  atomic.Bool
}

var errLayoutPending = errors.New("redis key layout not checked yet")

// Ping is the readiness check: ready once migrated.
func (l *layoutGate) Ping(context.Context) error {
	if !l.done.Load() {
		return errLayoutPending
	}
	return nil
}

// migrate runs one migration attempt.
func (l *layoutGate) migrate(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rep, err := l.store.Migrate(ctx, time.Now())
	if err != nil {
		l.log.Warn("redis key layout", "err", err)
		return err
	}
	if rep.Migrated {
		l.log.Info("redis key layout migrated from layout 1", "records", rep.Records, "aliases", rep.Aliases, "egress", rep.Egress)
	}
	l.done.Store(true)
	return nil
}

// Run retries the migration every 2s until it is done or ctx ends.
func (l *layoutGate) Run(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for !l.done.Load() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = l.migrate(ctx)
		}
	}
}
