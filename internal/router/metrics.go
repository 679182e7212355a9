package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/state"
)

// MetricsSampler keeps the sandboxes' resource samples (pool.Sampler).
type MetricsSampler interface {
	Metrics(ctx context.Context, info backend.Info) (api.SandboxMetrics, error)
	Watch(ctx context.Context, info backend.Info) (<-chan api.MetricsSample, func(), error)
	KeepWatching(sid string)
	// Latest is sid's latest sample if it is sampled here (pool.Sampler).
	Latest(sid string) (api.MetricsSample, bool)
}

// threadMetrics is GET /threads/{thread}/sandbox/metrics: the caller's
// sandbox's latest sample and short history as JSON, or with ?stream=1
// one Server-Sent Event per sample (event: sample) until the client
// leaves, the sandbox is no longer sampled, or the gateway drains; a
// stream counts against the provisioning-progress stream cap.
func (rt *Router) threadMetrics(c echo.Context, p *auth.Principal) error {
	thread, err := threadParam(c, p)
	if err != nil {
		return err
	}
	stream := false
	switch c.QueryParam("stream") {
	case "", "0", "false":
	case "1", "true":
		stream = true
	default:
		return errBadStream
	}
	if rt.sampler == nil {
		return backend.Unsupported("metrics", "this gateway samples no sandboxes")
	}
	ctx := c.Request().Context()
	rec, ok, err := rt.pool.Record(ctx, identity.SandboxID(p.User, thread))
	if err != nil {
		return err
	}
	if !ok || rec.State != state.StateActive {
		return pool.ErrNotFound // warm, creating, destroying: nothing of the thread's runs
	}
	if rec.User != p.User || rec.Thread != thread {
		return rt.identityConflict(ctx, rec, p.User, thread)
	}
	info := rec.Info()
	if !stream {
		m, err := rt.sampler.Metrics(ctx, info)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, m)
	}
	release, err := rt.progress.acquire(p)
	if err != nil {
		return err
	}
	defer release()
	samples, stop, err := rt.sampler.Watch(ctx, info)
	if err != nil {
		return err
	}
	defer stop()
	w := c.Response()
	openSSE(w)
	w.Flush()
	beat := time.NewTicker(rt.streams.heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-rt.streams.drained:
			return nil
		case <-beat.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return nil
			}
		case s, ok := <-samples:
			if !ok {
				return nil
			}
			rt.sampler.KeepWatching(info.SandboxID)
			if writeSample(w, s) != nil {
				return nil
			}
		}
		w.Flush()
	}
}

// writeSample writes one sample as an SSE event, its id the sample's time
// in Unix nanoseconds.
func writeSample(w io.Writer, s api.MetricsSample) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "id: %d\nevent: sample\ndata: %s\n\n", s.At.UnixNano(), data)
	return err
}
