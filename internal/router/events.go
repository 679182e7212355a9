package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
// events of the caller's thread as Server-Sent Events, each with its
// stream id. A client that gives where it stopped (Last-Event-ID, or
// ?since= an id or an RFC 3339 time) gets every event of the thread after
// it, whichever replica published it, then live ones; one that does not
// gets the thread's events among the fleet's latest first. With
// ?until=ready the stream ends at the first ready or failed, or at once
// when the latest events already end with one. Only the caller's own
// user's events are sent, whoever else uses the same thread name.
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
	from, resume, err := resumeFrom(c.Request())
	if err != nil {
		return err
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
	ctx := c.Request().Context()
	var latest []events.Event
	if !resume {
		rctx, cancel := context.WithTimeout(ctx, recentTimeout)
		recent, err := bus.Recent(rctx, 0)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: %w", pool.ErrState, err)
		}
		if len(recent) > 0 {
			// Follow from the newest event read, the thread's or not: what
			// comes after it is new.
			from, _ = events.After(recent[0].ID)
		}
		for i := len(recent) - 1; i >= 0; i-- {
			if mine(recent[i]) {
				latest = append(latest, recent[i])
			}
		}
	}

	w := c.Response()
	openSSE(w)
	for _, e := range latest {
		if writeEvent(w, e) != nil {
			return nil
		}
	}
	w.Flush()
	if untilReady && len(latest) > 0 && settled(latest[len(latest)-1].Type) {
		return nil
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	rt.streams.follow(ctx, w, bus.Follow(fctx, from, mine), writeEvent,
		func(e events.Event) bool { return untilReady && settled(e.Type) })
	return nil
}

// settled: a create that got this far has nothing more to report.
func settled(t events.Type) bool { return t == events.Ready || t == events.Failed }

// writeEvent writes e as one SSE event; its id (the stream id) comes back
// as Last-Event-ID when an EventSource reconnects.
func writeEvent(w io.Writer, e events.Event) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", e.ID, e.Type, data)
	return err
}

// resumeFrom is where a client stopped: Last-Event-ID (an EventSource
// reconnecting; it wins over the URL it reconnects to), else ?since= an
// event id or an RFC 3339 time. resume is false when it gave neither.
func resumeFrom(r *http.Request) (from events.Position, resume bool, err error) {
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		from, err = events.After(id)
		if err != nil {
			return from, false, fmt.Errorf("%w: Last-Event-ID %q", errBadSince, id)
		}
		return from, true, nil
	}
	if s := r.URL.Query().Get("since"); s != "" {
		from, err = events.ParsePosition(s)
		if err != nil {
			return from, false, fmt.Errorf("%w: since %q", errBadSince, s)
		}
		return from, true, nil
	}
	return from, false, nil
}
