package router

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/proxy"
)

// DefaultBodyIdleTimeout is how long a proxied request body may make no
// progress before the request is cut with 408.
const DefaultBodyIdleTimeout = 30 * time.Second

// serve proxies the request of c to up, its body cut when it stalls for
// rt.bodyIdle: a stalled body would keep the request, and so the sandbox,
// in flight forever (never reaped for idleness).
func (rt *Router) serve(c echo.Context, up proxy.Upstream, path, rawPath, port string, caller []string) int64 {
	return rt.serveCSP(c, up, path, rawPath, port, nil, caller)
}

// serveCSP is serve with the policy of document responses and the caller
// named to the sandbox (proxy.ServeCSP).
func (rt *Router) serveCSP(c echo.Context, up proxy.Upstream, path, rawPath, port string, csp, caller []string) int64 {
	r := c.Request()
	if r.Body != nil && r.Body != http.NoBody && r.Header.Get("Upgrade") == "" {
		if rt.bodyIdle <= 0 {
			// Never cut (the operator's choice): lift the server's total
			// body deadline too, which is for bodies the gateway reads.
			_ = http.NewResponseController(c.Response()).SetReadDeadline(time.Time{})
		} else {
			// A proxied body (an upload) may take long; the server's total
			// deadline becomes one on progress, moved by each read.
			body := r.Body
			r.Body = &idleBody{rc: body, w: c.Response(), timeout: rt.bodyIdle}
			defer func() { r.Body = body }()
		}
	}
	return rt.proxy.ServeCSP(c.Response(), r, up, path, rawPath, port, csp, caller)
}

// idleBody moves the client connection's read deadline ahead before each
// read of the body (a runtime timer, no syscall). It never clears it: the
// gateway's server (internal/serve) does when it reads the next request or
// starts watching for a hang-up; an expired deadline must stay, so that
// the server fails at once to discard the rest of a stalled body before
// the 408 instead of waiting on the client.
type idleBody struct {
	rc      io.ReadCloser
	w       http.ResponseWriter
	timeout time.Duration
}

func (b *idleBody) Read(p []byte) (int, error) {
	// An error: the connection has no deadlines (not expected), and the
	// body is unbounded.
	_ = http.NewResponseController(b.w).SetReadDeadline(time.Now().Add(b.timeout))
	n, err := b.rc.Read(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return n, fmt.Errorf("%w (%s): %w", errBodyIdle, b.timeout, err)
	}
	return n, err
}

func (b *idleBody) Close() error { return b.rc.Close() }
