package pool

import (
	"context"
	"time"
)

// HeartbeatInterval is how often each replica says it is alive; a replica
// not heard from for three intervals is shown as gone.
const HeartbeatInterval = 5 * time.Second

// Heartbeat writes this replica's instance name and the time into Redis
// every HeartbeatInterval, for the status page's replicas alive.
type Heartbeat struct{ p *Pool }

// NewHeartbeat returns the heartbeat loop of p.
func NewHeartbeat(p *Pool) *Heartbeat { return &Heartbeat{p: p} }

// Run beats at once, then every HeartbeatInterval until ctx ends.
func (h *Heartbeat) Run(ctx context.Context) {
	if err := runPass(ctx, HeartbeatInterval, h.beat); err != nil && ctx.Err() == nil {
		h.p.log.Warn("heartbeat pass failed", "err", err)
	}
	every(ctx, h.p.log, "heartbeat", HeartbeatInterval, h.beat)
}

func (h *Heartbeat) beat(ctx context.Context) error {
	return h.p.store.Beat(ctx, h.p.cfg.Instance, h.p.clock.Now())
}
