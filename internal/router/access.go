package router

import (
	"context"
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// dataPlane wraps a proxying handler: it answers the handler's error itself,
// so the status is known here, then accounts for the request: the proxy
// metrics, the sandbox's identity on the request's span, and one access log
// line. It admits the request first (authentication, scope, the user's
// limit), so refusals are counted and logged too. Nothing here allocates
// unless the access log is on or the request is in a sampled trace.
func (rt *Router) dataPlane(kind telemetry.RouteKind, h func(echo.Context, *auth.Principal) (proxied, error)) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		var res proxied
		r := c.Request()
		p, slot, err := rt.admit(r, threads)
		if err == nil {
			// A declared body over the limit is refused before a sandbox is
			// acquired for it; a streamed one is cut by the proxy.
			if err = rt.proxy.TooLarge(r); err == nil && hasDotSegment(r.URL.Path) {
				err = errDotSegment
			}
			if err == nil {
				res, err = h(c, p)
			}
			res.user = p.User
			rt.limits.end(slot)
		}
		if err != nil && !c.Response().Committed {
			rt.writeError(c.Response(), c.Request(), err)
		}
		rt.account(c, kind, res, time.Since(start))
		return nil
	}
}

func (rt *Router) account(c echo.Context, kind telemetry.RouteKind, res proxied, took time.Duration) {
	resp := c.Response()
	rt.metrics.Proxied(kind, resp.Status, took)
	ctx := c.Request().Context()
	if res.route != nil && telemetry.Recording(ctx) {
		span := trace.SpanFromContext(ctx)
		span.SetAttributes(res.route.SpanAttributes()...)
		span.SetAttributes(telemetry.KeyOutcome.String(string(res.outcome)))
	}
	if rt.log.Enabled(ctx, slog.LevelInfo) {
		rt.accessLog(ctx, c, kind, res, took)
	}
}

// accessLog writes the one line of a proxied request. It names the user,
// the sandbox and the thread, never a header, a query or a body.
func (rt *Router) accessLog(ctx context.Context, c echo.Context, kind telemetry.RouteKind, res proxied, took time.Duration) {
	r, resp := c.Request(), c.Response()
	sid, thread, backend := c.Param("id"), c.Param("thread"), ""
	if res.route != nil {
		id := res.route.Identity()
		sid, thread, backend = id.SandboxID, id.Thread, id.Backend
	}
	rt.log.LogAttrs(ctx, slog.LevelInfo, "proxied",
		slog.String("method", r.Method),
		slog.String("route", kind.String()),
		slog.String("path", r.URL.Path),
		slog.Int("status", resp.Status),
		slog.Float64("duration_ms", float64(took.Microseconds())/1000),
		slog.Int64("bytes_in", res.bytesIn),
		slog.Int64("bytes_out", resp.Size),
		slog.String("user", res.user),
		slog.String("sandbox_id", sid),
		slog.String("thread", thread),
		slog.String("backend", backend),
		slog.String("outcome", string(res.outcome)))
}
