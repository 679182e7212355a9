package pool

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/state"
)

// Publisher receives the lifecycle events of this replica's creates and
// destroys (events.Bus). Publish must not fail the step it reports.
type Publisher interface {
	Publish(ctx context.Context, e events.Event)
}

// Causes of Frozen and Thawed events: the freezer found the sandbox idle,
// or a caller asked (FreezeThread; a request to a frozen sandbox). CauseOOM
// is an OOMKilled event's.
const (
	CauseIdle     = "idle"
	CauseOnDemand = "on_demand"
	CauseOOM      = "oom"
)

// oomReportTTL is how long an OOM kill is remembered as reported: longer
// than any replica takes to sample a sandbox it serves again after a
// restart.
const oomReportTTL = 24 * time.Hour

// ReasonVanished is the reason of a Destroyed event for a sandbox that died
// behind the gateway's back (its record was dropped). It is no
// DestroyReason: the gateway destroyed nothing.
const ReasonVanished = "vanished"

// pullEventEvery paces one create's Pulling events: a browser or a CLI
// wants a moving number, not every line of the engine's stream.
const pullEventEvery = 250 * time.Millisecond

// notifier publishes this replica's lifecycle events, after the caller
// went on (background), in order.
type notifier struct {
	events  Publisher // nil = none
	backend string
	bg      *background
	// failReason: see Deps.FailReason.
	failReason func(error) string
	// claim claims the one report of an occurrence seen by several
	// replicas (statedb.Store.ClaimReport).
	claim func(ctx context.Context, sid, what string, ttl time.Duration) (bool, error)
	log   *slog.Logger
}

// publish sends one event about sid; a no-op without a Publisher. Events
// are published only off the cached path: a create, a reclaim, a release,
// a destroy, each already several Redis round trips long.
func (n *notifier) publish(ctx context.Context, t events.Type, sid, user, thread, cause string) {
	n.publishEvent(ctx, events.Event{Type: t, SandboxID: sid, User: user, Thread: thread, Cause: cause})
}

// publishEvent sends e, stamped with this replica's backend.
func (n *notifier) publishEvent(ctx context.Context, e events.Event) {
	if n.events == nil {
		return
	}
	e.Backend = n.backend
	n.emit(ctx, e)
}

// emit publishes e after the caller went on (see background), in order,
// stamped with the time it happened.
func (n *notifier) emit(ctx context.Context, e events.Event) {
	e.Time = time.Now()
	ctx = context.WithoutCancel(ctx)
	n.bg.inOrder(func() { n.events.Publish(ctx, e) })
}

// ready reports a sandbox handed out after a create, a warm reclaim, a
// pre-started sandbox's claim or an adoption (a hit on an active record
// is no step); how is the cause.
func (n *notifier) ready(ctx context.Context, r *Route, how Outcome) {
	n.publishEvent(ctx, events.Event{Type: events.Ready, SandboxID: r.SandboxID, Incarnation: r.Incarnation,
		User: r.User, Thread: r.Thread, Template: r.Template, Cause: string(how)})
}

// about reports step t of rec's sandbox.
func (n *notifier) about(ctx context.Context, t events.Type, rec state.Record, cause string) {
	n.publishEvent(ctx, events.Event{Type: t, SandboxID: rec.SandboxID, Incarnation: rec.Incarnation,
		User: rec.User, Thread: rec.Thread, Template: rec.Template, Cause: cause})
}

// oomKilled reports n OOM kills in info's incarnation, the occurrence
// what (a kill count, an engine event's time) being published once
// fleet-wide however many replicas saw it. The claim is a Redis round
// trip, so it runs in the background like the publish.
func (n *notifier) oomKilled(ctx context.Context, info backend.Info, what string, count int64) {
	if n.events == nil {
		return
	}
	e := events.Event{Type: events.OOMKilled, SandboxID: info.SandboxID, Incarnation: info.Incarnation,
		User: info.User, Thread: info.Thread, Backend: n.backend, Cause: CauseOOM, Count: count, Time: time.Now()}
	ctx = context.WithoutCancel(ctx)
	n.bg.inOrder(func() {
		if n.claim != nil {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			first, err := n.claim(cctx, info.SandboxID, "oom:"+info.Incarnation+":"+what, oomReportTTL)
			cancel()
			if err != nil {
				n.log.Warn("oom kill not reported", "sandbox_id", info.SandboxID, "thread", info.Thread, "backend", n.backend, "err", err)
				return
			}
			if !first {
				return // another replica reported it
			}
		}
		n.events.Publish(ctx, e)
	})
}

// gone reports a sandbox that no longer exists.
func (n *notifier) gone(ctx context.Context, rec state.Record, reason string) {
	n.about(ctx, events.Destroyed, rec, reason)
}

// failed reports an acquire that could not hand out a sandbox. A lock held
// elsewhere is no failure: that replica creates the sandbox and reports it.
func (n *notifier) failed(ctx context.Context, user, thread, sid string, err error) {
	if n.events == nil || errors.Is(err, ErrProvisioning) {
		return
	}
	reason := "failed"
	if n.failReason != nil {
		reason = n.failReason(err)
	}
	n.publish(ctx, events.Failed, sid, user, thread, reason)
}

// withProgress makes the backend's progress reports of one create events,
// at most one per pullEventEvery plus each step's last.
func (n *notifier) withProgress(ctx context.Context, user, thread, sid string) context.Context {
	if n.events == nil {
		return ctx
	}
	var mu sync.Mutex
	var last time.Time
	return backend.WithProgress(ctx, func(pr backend.Progress) {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if !pr.Done && !last.IsZero() && now.Sub(last) < pullEventEvery {
			return
		}
		last = now
		n.emit(ctx, events.Event{Type: events.Type(pr.Step), SandboxID: sid, User: user, Thread: thread,
			Backend: n.backend, Bytes: pr.Bytes, Total: pr.Total})
	})
}
