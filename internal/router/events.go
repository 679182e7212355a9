package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/pool"
)

// recentTimeout bounds the read of the recent events at the start of a
// provisioning-progress stream.
const recentTimeout = 2 * time.Second

// threadEvents is GET /threads/{thread}/sandbox/events: the lifecycle
// events of the caller's thread as Server-Sent Events. The thread's events
// still in the fleet's recent list come first (oldest first, newer than
// Last-Event-ID when the client reconnects), then live ones. With
// ?until=ready the stream ends at the first ready or failed, or at once
// when the replay already ends with one. Only the caller's own user's
// events are sent, whoever else uses the same thread name.
func (rt *Router) threadEvents(c echo.Context, p *auth.Principal) error {
	thread, err := threadParam(c, p)
	if err != nil {
		return err
	}
	untilReady := false
	switch c.QueryParam("until") {
	case "":
	case "ready":
		untilReady = true
	default:
		return errBadUntil
	}
	bus := rt.events
	if bus == nil {
		return echo.ErrNotFound
	}
	release, err := rt.progress.acquire(p)
	if err != nil {
		return err
	}
	defer release()
	user := p.User
	mine := func(e events.Event) bool { return e.User == user && e.Thread == thread }
	// Watch before reading the recent list: an event published in between
	// is in both, and is sent once (seen).
	live, stop := bus.Watch(mine)
	defer stop()
	ctx := c.Request().Context()
	rctx, cancel := context.WithTimeout(ctx, recentTimeout)
	recent, err := bus.Recent(rctx, 0)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: %w", pool.ErrState, err)
	}

	w := c.Response()
	openSSE(w)
	since := lastEventID(c.Request())
	seen := map[eventKey]bool{}
	var last events.Type
	for i := len(recent) - 1; i >= 0; i-- {
		e := recent[i]
		if !mine(e) || e.Time.UnixNano() <= since {
			continue
		}
		seen[keyOf(e)] = true
		if writeEvent(w, e) != nil {
			return nil
		}
		last = e.Type
	}
	w.Flush()
	if untilReady && settled(last) {
		return nil
	}
	rt.streams.follow(ctx, w, live, func(w io.Writer, e events.Event) error {
		if seen[keyOf(e)] {
			return nil
		}
		return writeEvent(w, e)
	}, func(e events.Event) bool { return untilReady && settled(e.Type) })
	return nil
}

// settled: a create that got this far has nothing more to report.
func settled(t events.Type) bool { return t == events.Ready || t == events.Failed }

// eventKey tells one event from another well enough to drop the copy a
// stream gets from both the recent list and the live watch.
type eventKey struct {
	nanos   int64
	typ     events.Type
	sandbox string
	replica string
	bytes   int64
}

func keyOf(e events.Event) eventKey {
	return eventKey{e.Time.UnixNano(), e.Type, e.SandboxID, e.Replica, e.Bytes}
}

// writeEvent writes e as one SSE event; its id (the event's time in Unix
// nanoseconds) comes back as Last-Event-ID when an EventSource reconnects.
func writeEvent(w io.Writer, e events.Event) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Time.UnixNano(), e.Type, data)
	return err
}

// lastEventID is the id a reconnecting client saw last, or 0.
func lastEventID(r *http.Request) int64 {
	n, err := strconv.ParseInt(r.Header.Get("Last-Event-ID"), 10, 64)
	if err != nil {
		return 0
	}
	return n
}
