package pool

import (
	"context"
	"errors"
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
}

// publish sends one event about sid; a no-op without a Publisher. Events
// are published only off the cached path: a create, a reclaim, a release,
// a destroy, each already several Redis round trips long.
func (n *notifier) publish(ctx context.Context, t events.Type, sid, user, thread, reason string) {
	if n.events == nil {
		return
	}
	n.emit(ctx, events.Event{Type: t, SandboxID: sid, User: user, Thread: thread, Backend: n.backend, Reason: reason})
}

// emit publishes e after the caller went on (see background), in order,
// stamped with the time it happened.
func (n *notifier) emit(ctx context.Context, e events.Event) {
	e.Time = time.Now()
	ctx = context.WithoutCancel(ctx)
	n.bg.inOrder(func() { n.events.Publish(ctx, e) })
}

// ready reports a sandbox handed out after a create, a warm reclaim or an
// adoption (a hit on an active record is no step).
func (n *notifier) ready(ctx context.Context, r *Route) {
	n.publish(ctx, events.Ready, r.SandboxID, r.User, r.Thread, "")
}

// gone reports a sandbox that no longer exists.
func (n *notifier) gone(ctx context.Context, rec state.Record, reason string) {
	n.publish(ctx, events.Destroyed, rec.SandboxID, rec.User, rec.Thread, reason)
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
