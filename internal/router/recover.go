package router

import (
	"errors"
	"log/slog"
	"net/http"
	"runtime/debug"

	"github.com/labstack/echo/v4"
)

// errPanic is what a recovered handler panic becomes: the error table's 500,
// the one status that means a bug in the gateway.
var errPanic = errors.New("handler panic")

// recoverJSON turns a handler panic into a JSON 500 (never a stack trace to
// the client) and logs it once with its stack; the log line carries the
// request's trace id when tracing is on. http.ErrAbortHandler is re-raised:
// it is how a proxied stream aborts on purpose.
func recoverJSON(log *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					r := c.Request()
					log.ErrorContext(r.Context(), "handler panic", "panic", v, "method", r.Method, "path", r.URL.Path,
						"stack", string(debug.Stack()))
					err = errPanic
				}
			}()
			return next(c)
		}
	}
}
