package router

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/proxy"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// The data plane's success path, against real sandbox HTTP servers: the
// router gets fake routes (the pool's are built by the pool only), so what
// is proven here is the router and the proxy, end to end over loopback.

// testRoute is a sandbox incarnation handed to the router by fakePool.
type testRoute struct {
	id       pool.Identity
	url      *url.URL
	rt       *http.Transport
	key      []string
	inflight atomic.Int32
	begun    atomic.Int32 // Begins ever made
}

var _ Sandbox = (*testRoute)(nil)

func (r *testRoute) BaseURL() *url.URL               { return r.url }
func (r *testRoute) RoundTripper() http.RoundTripper { return r.rt }
func (r *testRoute) SandboxKey() []string            { return r.key }
func (r *testRoute) PortHost() string                { return "" }
func (r *testRoute) Begin()                          { r.inflight.Add(1); r.begun.Add(1) }
func (r *testRoute) End()                            { r.inflight.Add(-1) }
func (r *testRoute) Identity() pool.Identity         { return r.id }
func (r *testRoute) SpanAttributes() []attribute.KeyValue {
	return telemetry.SandboxAttrs(r.id.SandboxID, r.id.Thread, r.id.Backend)
}

// newRoute is a route of (user, thread) to base with its own connection
// pool and secret ("" = none).
func newRoute(t *testing.T, user, thread, base, secret string) *testRoute {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	r := &testRoute{id: pool.Identity{SandboxID: identity.SandboxID(user, thread), User: user, Thread: thread,
		Incarnation: "inc-" + base, Backend: "test"}, url: u, rt: tr}
	if secret != "" {
		r.key = []string{secret}
	}
	return r
}

// sandbox is a sandbox incarnation of (default, t1): a real HTTP server
// serving h(its route), and its route.
func sandbox(t *testing.T, secret string, h func(*testRoute) http.HandlerFunc) (*testRoute, *httptest.Server) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	route := newRoute(t, "default", "t1", "http://"+srv.Listener.Addr().String(), secret)
	srv.Config.Handler = h(route)
	srv.Start()
	t.Cleanup(srv.Close)
	return route, srv
}

// deadURL is a loopback address nothing listens on: a dead incarnation.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// fakePool hands out one route for every thread, id and capability, and
// next when that route is reacquired after a dial failure.
type fakePool struct {
	stubPool
	route, next *testRoute
	mu          sync.Mutex
	calls       []string
	reacquired  []Sandbox
}

func (f *fakePool) called(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *fakePool) Acquire(_ context.Context, user, thread string) (Sandbox, pool.Outcome, error) {
	f.called("acquire " + user + " " + thread)
	return f.route, pool.OutcomeHit, nil
}

func (f *fakePool) Route(_ context.Context, sid string, who pool.Owner) (Sandbox, pool.Outcome, error) {
	f.called("route " + sid)
	if sid != f.route.id.SandboxID || !who.Owns(f.route.id.User, f.route.id.Thread) {
		return nil, "", pool.ErrNotFound
	}
	return f.route, pool.OutcomeHit, nil
}

func (f *fakePool) CapabilityRoute(_ context.Context, capability string) (Sandbox, pool.Outcome, error) {
	f.called("capability " + capability)
	return f.route, pool.OutcomeHit, nil
}

func (f *fakePool) Reacquire(_ context.Context, failed Sandbox) (Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reacquired = append(f.reacquired, failed)
	if failed != Sandbox(f.route) || f.next == nil {
		return nil, pool.ErrNotFound
	}
	return f.next, nil
}

func (f *fakePool) log() ([]string, []Sandbox) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...), append([]Sandbox(nil), f.reacquired...)
}

// received is what one request looked like on arrival at the sandbox.
type received struct {
	method, uri, host, body string
	header                  http.Header
	inflight                int32 // the route's in-flight count while it was served
}

// recorder is a sandbox handler that records each request and answers 200
// with a header that must not reach the client.
func recorder(got chan<- received) func(*testRoute) http.HandlerFunc {
	return func(route *testRoute) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			got <- received{method: r.Method, uri: r.RequestURI, host: r.Host, body: string(body),
				header: r.Header.Clone(), inflight: route.inflight.Load()}
			w.Header().Set(sandboxspec.SecretHeader, "leaked")
			w.Header().Set("X-Sandbox", "yes")
			_, _ = io.WriteString(w, "ok")
		}
	}
}

const testCapability = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG" // state.CapabilityLen characters

// eventually waits for cond, failing the test after 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 5s", what)
		}
	}
}

func TestDataPlaneProxiesToTheRoute(t *testing.T) {
	t.Parallel()
	sid := identity.SandboxID("default", "t1")
	cases := []struct {
		name, method, path, host, body string
		header                         map[string]string
		secret, sharedKey              string
		wantURI, wantKey               string
		wantCalls                      []string
	}{
		{name: "thread", method: "POST", path: "/threads/t1/v1/shell/exec?timeout=5", body: `{"command":"ls"}`,
			secret: "incarnation-secret", wantURI: "/v1/shell/exec?timeout=5", wantKey: "incarnation-secret",
			wantCalls: []string{"acquire default t1"}},
		{name: "thread, escaped path kept escaped", method: "GET", path: "/threads/t1/v1/file/a%2Fb",
			secret: "s", wantURI: "/v1/file/a%2Fb", wantKey: "s", wantCalls: []string{"acquire default t1"}},
		{name: "sandbox by id", method: "PUT", path: "/sandboxes/" + sid + "/v1/file/write", body: "data",
			secret: "s", wantURI: "/v1/file/write", wantKey: "s", wantCalls: []string{"route " + sid}},
		{name: "sandbox without a secret gets the shared key", method: "GET", path: "/sandboxes/" + sid + "/v1/sandbox",
			sharedKey: "shared", wantURI: "/v1/sandbox", wantKey: "shared", wantCalls: []string{"route " + sid}},
		{name: "capability", method: "GET", path: "/c/" + testCapability + "/v1/sandbox?x=1",
			secret: "s", wantURI: "/v1/sandbox?x=1", wantKey: "s", wantCalls: []string{"capability " + testCapability}},
		{name: "host route, whole path", method: "GET", path: "/websockify?token=1", host: sid + ".sbx.test",
			secret: "s", wantURI: "/websockify?token=1", wantKey: "s", wantCalls: []string{"route " + sid}},
		{name: "host route with a port", method: "GET", path: "/app.js?v=2", host: "8080-" + sid + ".sbx.test",
			secret: "s", wantURI: sandboxspec.PortPath("8080") + "/app.js?v=2", wantKey: "s", wantCalls: []string{"route " + sid}},
		{name: "thread port", method: "POST", path: "/threads/t1/ports/3000/api/items?page=2", body: `{"a":1}`,
			secret: "s", wantURI: sandboxspec.PortPath("3000") + "/api/items?page=2", wantKey: "s",
			wantCalls: []string{"acquire default t1"}},
		{name: "thread port root, escaped path kept escaped", method: "GET", path: "/threads/t1/ports/65535/a%2Fb",
			secret: "s", wantURI: sandboxspec.PortPath("65535") + "/a%2Fb", wantKey: "s", wantCalls: []string{"acquire default t1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := make(chan received, 1)
			route, sbx := sandbox(t, c.secret, recorder(got))
			fp := &fakePool{route: route}
			gw := httptest.NewServer(New(Deps{Pool: fp, Aliases: stubPool{}, HostSuffix: "sbx.test",
				Proxy: proxy.Config{SandboxAPIKey: c.sharedKey}}))
			t.Cleanup(gw.Close)

			req, err := http.NewRequest(c.method, gw.URL+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			if c.host != "" {
				req.Host = c.host
			}
			// Client credentials and selectors that must never reach a sandbox.
			req.Header.Set("Authorization", "Bearer gateway-credential")
			req.Header.Set("X-Api-Key", "gateway-key")
			req.Header.Set(sandboxspec.SecretHeader, "forged")
			req.Header.Set(proxy.ProxyPortHeader, "22")
			req.Header.Set("X-Forwarded-For", "203.0.113.9")
			req.Header.Set("X-Client", "kept")
			resp, err := gw.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "ok" {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if resp.Header.Get("X-Sandbox") != "yes" || resp.Header.Get(sandboxspec.SecretHeader) != "" {
				t.Errorf("response headers: %v", resp.Header)
			}
			r := <-got
			if r.method != c.method || r.uri != c.wantURI || r.body != c.body {
				t.Errorf("upstream got %s %s %q, want %s %s %q", r.method, r.uri, r.body, c.method, c.wantURI, c.body)
			}
			if want := sbx.Listener.Addr().String(); r.host != want {
				t.Errorf("upstream Host %q, want the sandbox's %q", r.host, want)
			}
			h := r.header
			if h.Get("Authorization") != "" || h.Get("X-Api-Key") != "" {
				t.Errorf("a gateway credential reached the sandbox: %v", h)
			}
			if k := h.Values(sandboxspec.SecretHeader); len(k) != 1 || k[0] != c.wantKey {
				t.Errorf("sandbox key %q, want %q", k, c.wantKey)
			}
			if p := h.Values(proxy.ProxyPortHeader); len(p) != 0 {
				t.Errorf("proxy port header %q reached the sandbox", p)
			}
			wantHost := req.Host
			if wantHost == "" {
				wantHost = gw.Listener.Addr().String()
			}
			if h.Get("X-Forwarded-For") != "203.0.113.9, 127.0.0.1" || h.Get("X-Forwarded-Host") != wantHost ||
				h.Get("X-Forwarded-Proto") != "http" || h.Get("X-Client") != "kept" {
				t.Errorf("forwarded headers: %v", h)
			}
			if r.inflight != 1 {
				t.Errorf("in flight while served: %d, want 1", r.inflight)
			}
			eventually(t, "in-flight mark released", func() bool { return route.inflight.Load() == 0 })
			if calls, _ := fp.log(); strings.Join(calls, ";") != strings.Join(c.wantCalls, ";") {
				t.Errorf("pool calls %q, want %q", calls, c.wantCalls)
			}
		})
	}
}

// A streamed response reaches the client as the sandbox writes it, with
// the route in flight until it ends, however it ends.
func TestDataPlaneStreams(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, contentType string
		clientLeaves      bool
	}{
		{name: "server-sent events", contentType: "text/event-stream"},
		{name: "chunked output", contentType: "application/octet-stream"},
		{name: "client leaves mid-stream", contentType: "text/event-stream", clientLeaves: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			more, done := make(chan struct{}), make(chan struct{})
			route, _ := sandbox(t, "s", func(*testRoute) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					defer close(done)
					w.Header().Set("Content-Type", c.contentType)
					_, _ = io.WriteString(w, "first\n")
					w.(http.Flusher).Flush()
					select {
					case <-more:
					case <-r.Context().Done():
						return
					}
					_, _ = io.WriteString(w, "second\n")
				}
			})
			gw := httptest.NewServer(New(Deps{Pool: &fakePool{route: route}, Aliases: stubPool{}}))
			t.Cleanup(gw.Close)

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", gw.URL+"/threads/t1/v1/shell/stream", nil)
			resp, err := gw.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != c.contentType {
				t.Fatalf("%d %s", resp.StatusCode, ct)
			}
			br := bufio.NewReader(resp.Body)
			// The sandbox holds the rest back until this line arrives: a
			// buffered response would never get here (the context ends it).
			if line, err := br.ReadString('\n'); line != "first\n" {
				t.Fatalf("first line %q: %v", line, err)
			}
			if n := route.inflight.Load(); n != 1 {
				t.Errorf("in flight mid-stream: %d, want 1", n)
			}
			if c.clientLeaves {
				cancel()
				<-done // the sandbox saw the request end
			} else {
				close(more)
				if rest, err := io.ReadAll(br); string(rest) != "second\n" || err != nil {
					t.Fatalf("rest %q: %v", rest, err)
				}
			}
			eventually(t, "in-flight mark released", func() bool { return route.inflight.Load() == 0 })
		})
	}
}

// A dial failure against a dead incarnation re-acquires the sandbox and
// sends the same request, body included, to the new one with its own secret.
func TestDataPlaneRetriesOnANewIncarnation(t *testing.T) {
	t.Parallel()
	sid := identity.SandboxID("default", "t1")
	for _, c := range []struct{ name, method, path, body string }{
		{name: "thread", method: "POST", path: "/threads/t1/v1/shell/exec", body: `{"command":"ls"}`},
		{name: "sandbox by id", method: "GET", path: "/sandboxes/" + sid + "/v1/sandbox"},
		{name: "capability", method: "PUT", path: "/c/" + testCapability + "/v1/file/write", body: "data"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := make(chan received, 1)
			next, _ := sandbox(t, "new-secret", recorder(got))
			dead := newRoute(t, "default", "t1", deadURL(t), "old-secret")
			fp := &fakePool{route: dead, next: next}
			metrics := telemetry.NewMetrics()
			gw := httptest.NewServer(New(Deps{Pool: fp, Aliases: stubPool{}, Metrics: metrics}))
			t.Cleanup(gw.Close)

			req, _ := http.NewRequest(c.method, gw.URL+c.path, strings.NewReader(c.body))
			resp, err := gw.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "ok" {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			r := <-got
			if r.method != c.method || r.body != c.body || r.header.Get(sandboxspec.SecretHeader) != "new-secret" {
				t.Errorf("the new incarnation got %s %q key %q", r.method, r.body, r.header.Get(sandboxspec.SecretHeader))
			}
			if r.inflight != 1 {
				t.Errorf("new route in flight while served: %d, want 1", r.inflight)
			}
			if _, re := fp.log(); len(re) != 1 || re[0] != Sandbox(dead) {
				t.Errorf("reacquired %v, want once the dead route", re)
			}
			eventually(t, "both in-flight marks released", func() bool {
				return dead.inflight.Load() == 0 && next.inflight.Load() == 0
			})
			if dead.begun.Load() != 1 || next.begun.Load() != 1 {
				t.Errorf("begun: dead %d, next %d, want 1 each", dead.begun.Load(), next.begun.Load())
			}
			if n := scrape(t, gw.URL, "sandgate_upstream_dial_retries_total"); n != "1" {
				t.Errorf("dial retries metric %q, want 1", n)
			}
		})
	}
}

// A dead incarnation whose sandbox cannot be had again is the pool's
// error, and the first route's mark is still released.
func TestDataPlaneRetryFailureReleasesTheRoute(t *testing.T) {
	t.Parallel()
	dead := newRoute(t, "default", "t1", deadURL(t), "")
	gw := httptest.NewServer(New(Deps{Pool: &fakePool{route: dead}, Aliases: stubPool{}}))
	t.Cleanup(gw.Close)
	resp, err := gw.Client().Get(gw.URL + "/threads/t1/v1/sandbox")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(body), `"not_found"`) {
		t.Fatalf("%d %s, want the pool's 404", resp.StatusCode, body)
	}
	eventually(t, "in-flight mark released", func() bool { return dead.inflight.Load() == 0 })
}

// scrape reads one unlabelled metric from /metrics.
func scrape(t *testing.T, base, name string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	return ""
}
