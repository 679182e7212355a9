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
	// net/http has no bound from the end of the head: ReadTimeout bounds
	// the whole request from its first byte, so the body gets what the head
	// did not use of ReadHeaderTimeout on top of BodyTimeout.
	var readTimeout time.Duration
	if cfg.BodyTimeout > 0 {
		readTimeout = cfg.ReadHeaderTimeout + cfg.BodyTimeout
	}
	// Half duplex, net/http's default: a response begun before its request
	// body was read discards the rest of the body (serve is full duplex).
	// With EnableFullDuplex, net/http (go1.26) panicked reading the next
	// request on a connection whose body the router had left unread
	// ("invalid concurrent Body.Read call" after a 507: TestThreadDataQuota
	// and six more e2e tests under SANDGATE_TEST_HTTP_IMPL=net/http).
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       serverIdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		// serve hands "OPTIONS *" to the handler too.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
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
