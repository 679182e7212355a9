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

// errBodyIdle is a request body that stalled for the body idle timeout.
var errBodyIdle = errors.New("the request body made no progress in time")

// serve proxies the request of c to up, its body cut when it stalls for
// rt.bodyIdle: a stalled body would keep the request, and so the sandbox,
// in flight forever (never reaped for idleness).
func (rt *Router) serve(c echo.Context, up proxy.Upstream, path, rawPath, port string) int64 {
	r := c.Request()
	if rt.bodyIdle > 0 && r.Body != nil && r.Body != http.NoBody && r.Header.Get("Upgrade") == "" {
		body := r.Body
		idle := &idleBody{rc: body, w: c.Response(), timeout: rt.bodyIdle}
		r.Body = idle
		defer func() {
			// A body not read to its end (an upstream that answered early)
			// leaves a deadline behind. An expired one stays: net/http then
			// fails at once to discard the rest of the body before the 408
			// instead of waiting on the stalled client.
			if !idle.expired {
				_ = http.NewResponseController(c.Response()).SetReadDeadline(time.Time{})
			}
			r.Body = body
		}()
	}
	return rt.proxy.Serve(c.Response(), r, up, path, rawPath, port)
}

// idleBody moves the client connection's read deadline ahead before each
// read of the body (a runtime timer, no syscall) and clears it at the end:
// a deadline left behind would cancel the request from net/http's
// background read while a long response streams.
type idleBody struct {
	rc      io.ReadCloser
	w       http.ResponseWriter
	timeout time.Duration
	done    bool // read to its end or failed: the deadline is cleared
	expired bool // the deadline passed; it is left in place
}

func (b *idleBody) Read(p []byte) (int, error) {
	if b.done {
		return b.rc.Read(p)
	}
	ctl := http.NewResponseController(b.w)
	if ctl.SetReadDeadline(time.Now().Add(b.timeout)) != nil {
		b.done = true // the connection has no deadlines (not expected): unbounded
		return b.rc.Read(p)
	}
	n, err := b.rc.Read(p)
	if err != nil {
		b.done = true
		if errors.Is(err, os.ErrDeadlineExceeded) {
			b.expired = true
			return n, fmt.Errorf("%w (%s): %w", errBodyIdle, b.timeout, err)
		}
		_ = ctl.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (b *idleBody) Close() error { return b.rc.Close() }
