package proxy

import (
	"context"
	"errors"
	"net/http"
	"os"
)

// handleError is the ReverseProxy's error handler: a client that went away
// (its context ended, or its body broke off with it) is only logged (499),
// everything else goes to the router's error table. A body that hit its read
// deadline is not a client gone, though the server ends its context too:
// the router answers it (408).
func (p *Proxy) handleError(w http.ResponseWriter, r *http.Request, err error) {
	var body *BodyReadError
	gone := errors.Is(err, context.Canceled) || errors.As(err, &body) && !errors.Is(err, os.ErrDeadlineExceeded)
	if r.Context().Err() != nil && gone {
		p.log.DebugContext(r.Context(), "client gone", "status", StatusClientClosed, "path", r.URL.Path)
		w.WriteHeader(StatusClientClosed)
		return
	}
	p.writeErr(w, r, err)
}

// ErrUpgradeCapacity refuses an upgrade (WebSocket) past MaxUpgraded.
var ErrUpgradeCapacity = errors.New("too many upgraded connections")

// StatusClientClosed is nginx's 499: the client closed the connection.
const StatusClientClosed = 499
