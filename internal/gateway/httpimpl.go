package gateway

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/remote"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/proxy"
	"github.com/sandgate/sandgate/internal/serve"
)

// httpServer is what Run needs of the client-facing server: serve's, or
// net/http's with server_impl: net/http. Both return http.ErrServerClosed
// from Serve after Shutdown.
type httpServer interface {
	Serve(l net.Listener) error
	Shutdown(ctx context.Context) error
}

// serverIdleTimeout is above common load balancer idle timeouts (60-75 s),
// so the gateway is never the side that closes a connection the balancer
// is about to reuse.
const serverIdleTimeout = 120 * time.Second

// newServer is the server cfg.ServerImpl names, serving handler with the
// configured timeouts and header limit (the connection limits are the
// listener's, serve.LimitListener, whichever server accepts).
func newServer(cfg config.Config, handler http.Handler, log *slog.Logger) httpServer {
	if cfg.ServerImpl != config.ImplNetHTTP {
		return &serve.Server{
			Handler:           handler,
			ReadHeaderTimeout: cfg.ReadHeaderTimeout,
			BodyTimeout:       cfg.BodyTimeout,
			IdleTimeout:       serverIdleTimeout,
			MaxHeaderBytes:    cfg.MaxHeaderBytes,
			Log:               log,
		}
	}
	// Half duplex, net/http's default: a response begun before its request
	// body was read discards the rest of the body (serve is full duplex).
	// With EnableFullDuplex, net/http (go1.26) panicked reading the next
	// request on a connection whose body the router had left unread
	// ("invalid concurrent Body.Read call" after a 507: TestThreadDataQuota
	// and six more e2e tests under SANDGATE_TEST_HTTP_IMPL=net/http).
	return &http.Server{
		Handler:           bodyDeadline(handler, cfg.BodyTimeout),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       serverIdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		// serve hands "OPTIONS *" to the handler too.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// bodyDeadline gives net/http's server serve's BodyTimeout: a request body
// is due within timeout of the end of its head (net/http's ReadTimeout
// counts from the first byte of the head). Only a request with a body: on
// one without, net/http's hang-up watch is already reading, and a deadline
// would end it and cancel the request. The watch clears the deadline once
// the body is read; a handler may move it (bodyidle.go).
func bodyDeadline(h http.Handler, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != http.NoBody {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))
		}
		h.ServeHTTP(w, r)
	})
}

// NewSandboxTransport is the connection pool of one sandbox incarnation:
// dialled by URL host, or on its Unix socket ("" = none).
func NewSandboxTransport(socket string) http.RoundTripper {
	return newSandboxTransport(proxy.TransportConfig{}, socket)
}

func newSandboxTransport(cfg proxy.TransportConfig, socket string) http.RoundTripper {
	if socket != "" {
		cfg.Dial = backend.DialUnix(socket, 2*time.Second)
	}
	return proxy.NewTransport(cfg)
}

// sandboxTransport is NewSandboxTransport for the named backend and
// transport_impl. The remote backend's sandbox URLs come from a
// provisioner's answers: their connections refuse, after name resolution,
// the addresses no sandbox lives at (remote.DialControl).
func sandboxTransport(backendName, impl string) func(string) http.RoundTripper {
	base := proxy.TransportConfig{Standard: impl == config.ImplNetHTTP}
	if backendName != remote.Name {
		return func(socket string) http.RoundTripper { return newSandboxTransport(base, socket) }
	}
	d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second, Control: remote.DialControl}
	base.Dial = d.DialContext
	return func(string) http.RoundTripper { return proxy.NewTransport(base) }
}
