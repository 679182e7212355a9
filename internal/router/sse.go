package router

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/events"
)

// streamHeartbeat keeps a quiet stream open through proxies that cut idle
// connections (nginx: 60 s), and tells the client it is alive.
const streamHeartbeat = 15 * time.Second

// sseStreams are the gateway's open Server-Sent Event streams (provisioning
// progress, the status page): one heartbeat, and one drain that ends them
// all, because the server's Shutdown waits for active requests and a stream
// is active until its client leaves.
type sseStreams struct {
	heartbeat time.Duration
	drained   chan struct{}
	once      sync.Once
}

func newSSEStreams() *sseStreams {
	return &sseStreams{heartbeat: streamHeartbeat, drained: make(chan struct{})}
}

func (s *sseStreams) drain() { s.once.Do(func() { close(s.drained) }) }

// openSSE writes the heads of an event stream.
func openSSE(w *echo.Response) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx must pass each event on, not buffer them
	w.WriteHeader(http.StatusOK)
}

// follow sends live's events with write until the client leaves, the
// gateway drains, live closes, a write fails, or last says the event just
// sent ends the stream; a comment line every heartbeat keeps it open.
func (s *sseStreams) follow(ctx context.Context, w *echo.Response, live <-chan events.Event,
	write func(io.Writer, events.Event) error, last func(events.Event) bool) {
	beat := time.NewTicker(s.heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.drained:
			return
		case <-beat.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
		case e, ok := <-live:
			if !ok || write(w, e) != nil {
				return
			}
			if last(e) {
				w.Flush()
				return
			}
		}
		w.Flush()
	}
}
