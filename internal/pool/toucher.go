package pool

import (
	"context"
	"log/slog"
	"time"

	"github.com/sandgate/sandgate/internal/state"
)

// routeIdleDrop is how long an expired, unused route stays cached before it
// is dropped, so a replica's memory follows its traffic, not its history.
const routeIdleDrop = time.Minute

// Toucher flushes this replica's sandbox activity to Redis: one script call
// per interval for every sandbox served since the last flush or with a
// request still in flight. Proxied requests never pay a Redis round trip.
type Toucher struct{ p toucherParams }

type toucherParams struct {
	interval time.Duration
	cache    *cache
	store    activityToucher
	clock    Clock
	log      *slog.Logger
}

func newToucher(p toucherParams) *Toucher { return &Toucher{p: p} }

// Run flushes every TouchInterval until ctx ends.
func (t *Toucher) Run(ctx context.Context) {
	every(ctx, t.p.log, "touch", t.p.interval, t.Flush)
}

// Flush writes pending touches and drops routes Redis no longer backs.
func (t *Toucher) Flush(ctx context.Context) error {
	p := t.p
	now := p.clock.Now()
	var (
		entries []state.TouchEntry
		routes  []*Route
		idle    []*Route
	)
	p.cache.each(func(r *Route) {
		switch {
		case r.touched.Swap(false) || r.inflight.Load() > 0:
			entries = append(entries, state.TouchEntry{SandboxID: r.SandboxID, Incarnation: r.Incarnation})
			routes = append(routes, r)
		case now.UnixNano() > r.expires.Load()+int64(routeIdleDrop):
			idle = append(idle, r)
		}
	})
	for _, r := range idle {
		p.cache.drop(r.SandboxID, r)
	}
	stale, err := p.store.Touch(ctx, entries, now)
	if err != nil {
		for _, r := range routes {
			r.touched.Store(true) // retried next flush
		}
		return err
	}
	for _, i := range stale {
		p.cache.drop(routes[i].SandboxID, routes[i])
	}
	return nil
}
