package pool

import (
	"context"
	"log/slog"
	"time"
)

// HeartbeatInterval is how often each replica says it is alive; a replica
// not heard from for three intervals is shown as gone.
const HeartbeatInterval = 5 * time.Second

// Heartbeat writes this replica's instance name and the time into Redis
// every HeartbeatInterval, for the status page's replicas alive.
type Heartbeat struct{ p heartbeatParams }

type heartbeatParams struct {
	instance string
	store    beater
	clock    Clock
	log      *slog.Logger
}

// beater records that a replica is alive.
type beater interface {
	Beat(ctx context.Context, instance string, now time.Time) error
}

func newHeartbeat(p heartbeatParams) *Heartbeat { return &Heartbeat{p: p} }

// Run beats at once, then every HeartbeatInterval until ctx ends.
func (h *Heartbeat) Run(ctx context.Context) {
	if err := runPass(ctx, HeartbeatInterval, h.beat); err != nil && ctx.Err() == nil {
		h.p.log.Warn("heartbeat pass failed", "err", err)
	}
	every(ctx, h.p.log, "heartbeat", HeartbeatInterval, h.beat)
}

func (h *Heartbeat) beat(ctx context.Context) error {
	return h.p.store.Beat(ctx, h.p.instance, h.p.clock.Now())
}
