package proxy

import (
	"context"
	"errors"
	"net/http"
)

// handleError is the ReverseProxy's error handler: a client that went away
// (its context ended, or its body broke off with it) is only logged (499),
// everything else goes to the router's error table.
func (p *Proxy) handleError(w http.ResponseWriter, r *http.Request, err error) {
	var body *BodyReadError
	if r.Context().Err() != nil && (errors.Is(err, context.Canceled) || errors.As(err, &body)) {
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
