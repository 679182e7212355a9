package pool

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// oomWatchRetry is the pause before watching again after the engine's
// event stream failed (the engine restarting, say).
const oomWatchRetry = 5 * time.Second

// oomBurst folds an engine's OOM events: the engine reports each time the
// kernel's memory cgroup runs out (docker's "oom" is containerd's OOM
// notification), and one kill can come with several of them while the
// victim dies and the others go on allocating. Events of one incarnation
// less than this apart are one burst and one oom_killed event.
const oomBurst = 2 * time.Second

// OOMWatch publishes the OOM kills a backend's engine reports as they
// happen (backend.OOMWatcher: docker's events) as oom_killed events.
// Every replica watches the engine it uses; each burst (oomBurst) is
// published once fleet-wide (notifier.oomKilled claims it by container
// and the burst's first event time, which every replica's stream of the
// one engine carries alike). Kills while the stream is down are not
// replayed.
type OOMWatch struct {
	p      oomWatchParams
	bursts oomBursts
}

type oomWatchParams struct {
	fleet       string
	watcher     backend.OOMWatcher // nil: the backend reports none this way
	backendName string
	notes       *notifier
	log         *slog.Logger
}

func newOOMWatch(p oomWatchParams) *OOMWatch { return &OOMWatch{p: p} }

// Run watches until ctx ends.
func (w *OOMWatch) Run(ctx context.Context) {
	if w.p.watcher == nil {
		return
	}
	for {
		err := w.p.watcher.WatchOOM(ctx, w.p.fleet, func(info backend.Info, at time.Time) {
			if first, ok := w.bursts.start(info.Incarnation, at); ok {
				w.p.notes.oomKilled(ctx, info, strconv.FormatInt(first.UnixNano(), 10), 1)
			}
		})
		if err != nil {
			w.p.log.Warn("oom events not watched", "backend", w.p.backendName, "err", err, "retry_in", oomWatchRetry)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(oomWatchRetry):
		}
	}
}

// oomBursts remembers, per incarnation, the first and the last event of
// its current burst. Only the watch loop uses it.
type oomBursts map[string][2]time.Time

// start reports whether at begins a new burst of incarnation's events
// (and its time); an event within oomBurst of the one before is part of
// its burst. Bursts that ended are forgotten as new ones come.
func (b *oomBursts) start(incarnation string, at time.Time) (time.Time, bool) {
	if *b == nil {
		*b = oomBursts{}
	}
	for inc, burst := range *b {
		if at.Sub(burst[1]) >= oomBurst {
			delete(*b, inc)
		}
	}
	if burst, ok := (*b)[incarnation]; ok {
		(*b)[incarnation] = [2]time.Time{burst[0], at}
		return burst[0], false
	}
	(*b)[incarnation] = [2]time.Time{at, at}
	return at, true
}
