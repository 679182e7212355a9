package gateway

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
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
	log := slog.New(slog.DiscardHandler)
	for _, impl := range []string{config.ImplSandgate, "" /* before defaults: the default */, config.ImplNetHTTP} {
		cfg.ServerImpl = impl
		switch s := newServer(cfg, http.NotFoundHandler(), log).(type) {
		case *serve.Server:
			if impl == config.ImplNetHTTP || s.ReadHeaderTimeout != 7*time.Second || s.BodyTimeout != 11*time.Second ||
				s.MaxHeaderBytes != 32<<10 || s.IdleTimeout != serverIdleTimeout {
				t.Errorf("%q: %+v", impl, s)
			}
		case *http.Server:
			// ReadTimeout would count from the head's first byte: the body
			// deadline is bodyDeadline's (TestServerImplBodyTimeout).
			if impl != config.ImplNetHTTP || s.ReadHeaderTimeout != 7*time.Second || s.ReadTimeout != 0 ||
				s.MaxHeaderBytes != 32<<10 || s.IdleTimeout != serverIdleTimeout || !s.DisableGeneralOptionsHandler {
				t.Errorf("%q: %+v", impl, s)
			}
		default:
			t.Errorf("%q: %T", impl, s)
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

// On either server a stalled request body is cut at body_timeout from the
// end of its head, and a request without a body is not: its handler may
// run longer (an exec) with its context alive.
func TestServerImplBodyTimeout(t *testing.T) {
	t.Parallel()
	const bodyTimeout = 300 * time.Millisecond
	for _, impl := range config.HTTPImpls {
		t.Run(strings.ReplaceAll(impl, "/", "-"), func(t *testing.T) {
			t.Parallel()
			cfg := config.Default()
			cfg.ServerImpl, cfg.BodyTimeout = impl, bodyTimeout
			s := newServer(cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Body == http.NoBody {
					select {
					case <-time.After(3 * bodyTimeout):
						_, _ = io.WriteString(w, "slow and whole")
					case <-r.Context().Done():
						w.WriteHeader(http.StatusServiceUnavailable)
					}
					return
				}
				if _, err := io.ReadAll(r.Body); err != nil {
					w.WriteHeader(http.StatusRequestTimeout)
				}
			}), slog.New(slog.DiscardHandler))
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = s.Serve(l) }()
			t.Cleanup(func() { _ = s.Shutdown(context.Background()) })

			resp, err := http.Get("http://" + l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "slow and whole" {
				t.Fatalf("a request without a body, past body_timeout: %d %q", resp.StatusCode, b)
			}

			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nstalled")
			start := time.Now()
			_ = c.SetReadDeadline(start.Add(10 * bodyTimeout))
			_, err = io.Copy(io.Discard, c)
			if took := time.Since(start); err != nil || took < bodyTimeout {
				t.Fatalf("stalled body: connection closed after %s (%v), want at body_timeout %s", took, err, bodyTimeout)
			}
		})
	}
}
