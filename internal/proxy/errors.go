package proxy

import (
	"context"
	"errors"
	"net/http"
)

// handleError is the ReverseProxy's error handler: a client that went away is
// only logged (499), everything else goes to the router's error table.
func (p *Proxy) handleError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
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
