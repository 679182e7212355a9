package router

import (
	"log/slog"
	"net/http"
	"net/http/httputil"
	"testing"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/proxy"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// discardWriter is a ResponseWriter reused by every request of a
// benchmark: the server's side is the same for the gateway and the floor.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

// BenchmarkDataPlane is one small GET through the router's whole data
// plane (echo, middleware, the cached acquire, the quota check, the
// proxy) to a loopback sandbox, beside httputil.ReverseProxy alone on
// the same route's transport ("floor"): the difference is what the
// gateway adds to a request.
func BenchmarkDataPlane(b *testing.B) {
	p, _ := realPool(b)
	routes := PoolOf(p)
	rt := New(Deps{Pool: routes, Aliases: stubPool{}, Log: slog.New(slog.DiscardHandler), Metrics: telemetry.NewMetrics(), Limits: NewLimits(LimitsConfig{})})
	sb, _, err := routes.Acquire(b.Context(), auth.Local().User, "t1")
	if err != nil {
		b.Fatal(err)
	}
	floor := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(sb.BaseURL())
			pr.Out.URL.Path = "/v1/sandbox"
			pr.Out.Header[sandboxspec.SecretHeader] = sb.SandboxKey()
		},
		Transport: sb.RoundTripper(), BufferPool: proxy.BufferPool{}}
	for _, c := range []struct {
		name string
		h    http.Handler
		path string
	}{
		{"gateway", rt, "/threads/t1/v1/sandbox"},
		{"floor", floor, "/v1/sandbox"},
	} {
		b.Run(c.name, func(b *testing.B) {
			r, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:8080"+c.path, nil)
			r.RemoteAddr = "127.0.0.1:40000"
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				c.h.ServeHTTP(w, r)
				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	}
}
