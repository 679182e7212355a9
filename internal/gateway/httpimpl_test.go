package gateway

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/serve"
)

// server_impl picks the server, and either carries the configured
// timeouts and header limit.
func TestNewServerImpl(t *testing.T) {
	t.Parallel()
	cfg := config.Default()
	cfg.ReadHeaderTimeout, cfg.BodyTimeout, cfg.MaxHeaderBytes = 7*time.Second, 11*time.Second, 32<<10
	noBody := cfg
	noBody.BodyTimeout = -1
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		impl        string
		cfg         config.Config
		readTimeout time.Duration // net/http's only
	}{
		{config.ImplSandgate, cfg, 0},
		{"", cfg, 0}, // before defaults: the default
		{config.ImplNetHTTP, cfg, 18 * time.Second},
		{config.ImplNetHTTP, noBody, 0},
	} {
		c.cfg.ServerImpl = c.impl
		switch s := newServer(c.cfg, http.NotFoundHandler(), log).(type) {
		case *serve.Server:
			if c.impl == config.ImplNetHTTP || s.ReadHeaderTimeout != 7*time.Second || s.BodyTimeout != c.cfg.BodyTimeout ||
				s.MaxHeaderBytes != 32<<10 || s.IdleTimeout != serverIdleTimeout {
				t.Errorf("%q: %+v", c.impl, s)
			}
		case *http.Server:
			if c.impl != config.ImplNetHTTP || s.ReadHeaderTimeout != 7*time.Second || s.ReadTimeout != c.readTimeout ||
				s.MaxHeaderBytes != 32<<10 || s.IdleTimeout != serverIdleTimeout || !s.DisableGeneralOptionsHandler {
				t.Errorf("%q: %+v", c.impl, s)
			}
		default:
			t.Errorf("%q: %T", c.impl, s)
		}
	}
}

// transport_impl picks the exchange of every backend's sandbox transport:
// net/http's http.Transport reports GotConn to an httptrace hook, the
// pool's own exchange does not.
func TestSandboxTransportImpl(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		backend, impl string
		std           bool
	}{
		{"process", config.ImplSandgate, false},
		{"process", config.ImplNetHTTP, true},
		{"docker", config.ImplNetHTTP, true},
		{"remote", config.ImplSandgate, false},
		{"remote", config.ImplNetHTTP, true},
	} {
		rt := sandboxTransport(c.backend, c.impl)("")
		viaStd := false
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { viaStd = true }})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.backend, c.impl, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" || viaStd != c.std {
			t.Errorf("%s %s: %q, through net/http %v, want %v", c.backend, c.impl, b, viaStd, c.std)
		}
		rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	}
}
