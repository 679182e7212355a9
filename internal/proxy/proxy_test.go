package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
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

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// upstream is a test sandbox: a real HTTP server counting its connections.
type upstream struct {
	*httptest.Server
	conns atomic.Int32
}

func newUpstream(t *testing.T, h http.Handler) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewUnstartedServer(h)
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// target implements Upstream over a test server.
type target struct {
	base     *url.URL
	rt       *Transport
	key      []string // SandboxKey; nil = none
	portHost string   // PortHost; "" = the bridge
	inflight atomic.Int32
}

func newTarget(t *testing.T, rawURL string) *target {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTransport(TransportConfig{})
	t.Cleanup(tr.CloseIdleConnections)
	return &target{base: u, rt: tr}
}

func (x *target) BaseURL() *url.URL               { return x.base }
func (x *target) RoundTripper() http.RoundTripper { return x.rt }
func (x *target) SandboxKey() []string            { return x.key }
func (x *target) PortHost() string                { return x.portHost }
func (x *target) Begin()                          { x.inflight.Add(1) }
func (x *target) End()                            { x.inflight.Add(-1) }

// fixedResolver hands out next on Retry and counts calls.
type fixedResolver struct {
	next  Upstream
	err   error
	calls atomic.Int32
}

func (r *fixedResolver) Retry(context.Context, Upstream) (Upstream, error) {
	r.calls.Add(1)
	return r.next, r.err
}

// gatewayFor serves the proxy in front of the upstream the test picks.
func gatewayFor(t *testing.T, p *Proxy, pick func() Upstream) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.Serve(w, r, pick(), r.URL.Path, r.URL.RawPath, "")
	}))
	t.Cleanup(s.Close)
	return s
}

func errWriter(w http.ResponseWriter, _ *http.Request, err error) {
	var ue *UnreachableError
	var re *ResolveError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		w.WriteHeader(http.StatusRequestEntityTooLarge)
	case errors.Is(err, ErrUpgradeCapacity):
		w.WriteHeader(http.StatusServiceUnavailable)
	case errors.As(err, &re):
		w.WriteHeader(http.StatusServiceUnavailable)
	case errors.As(err, &ue):
		w.WriteHeader(http.StatusBadGateway)
	default:
		w.WriteHeader(http.StatusInternalServerError)
	}
	fmt.Fprint(w, err.Error())
}

func TestTransportReusesConnections(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		default:
			_, _ = io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
		}
	}))
	tg := newTarget(t, up.URL)
	p := New(Config{}, &fixedResolver{}, errWriter, nil)
	gw := gatewayFor(t, p, func() Upstream { return tg })
	client := gw.Client()
	for i := range 30 {
		method, path := "GET", "/v1/x"
		var body io.Reader
		switch i % 3 {
		case 1:
			method, body = "POST", strings.NewReader(strings.Repeat("b", 5000))
		case 2:
			path = "/empty"
		}
		req, _ := http.NewRequest(method, gw.URL+path, body)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if path != "/empty" && string(b) != method+" "+path {
			t.Fatalf("request %d: %q", i, b)
		}
	}
	if n := up.conns.Load(); n != 1 {
		t.Fatalf("30 sequential requests used %d upstream connections, want 1", n)
	}
	// The handler's End runs just after the client has its response.
	deadline := time.Now().Add(5 * time.Second)
	for tg.inflight.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if tg.inflight.Load() != 0 {
		t.Fatalf("in-flight count leaked: %d", tg.inflight.Load())
	}
}

func TestTransportStreamsChunkedBothWays(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "len=%d te=%v\n", len(got), r.TransferEncoding)
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "tail\n")
	}))
	tg := newTarget(t, up.URL)
	p := New(Config{}, &fixedResolver{}, errWriter, nil)
	gw := gatewayFor(t, p, func() Upstream { return tg })
	pr, pw := io.Pipe()
	go func() {
		for range 10 {
			_, _ = pw.Write([]byte(strings.Repeat("z", 1000)))
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", gw.URL+"/v1/stream", pr) // unknown length: chunked
	resp, err := gw.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "len=10000 te=[chunked]\n" {
		t.Fatalf("first line %q %v", line, err)
	}
	// The first line arrived while the upstream is still blocked: streamed.
	close(release)
	rest, _ := io.ReadAll(br)
	if string(rest) != "tail\n" {
		t.Fatalf("rest %q", rest)
	}
}

func TestDeadUpstreamIsADialErrorAndRetried(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "got %s", b)
	})
	old := newUpstream(t, h)
	tg := newTarget(t, old.URL)
	fresh := newTarget(t, newUpstream(t, h).URL)
	res := &fixedResolver{next: fresh}
	p := New(Config{}, res, errWriter, nil)
	gw := gatewayFor(t, p, func() Upstream { return tg })

	post := func() (int, string) {
		resp, err := gw.Client().Post(gw.URL+"/v1/x", "text/plain", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(); code != 200 || body != "got payload" {
		t.Fatalf("warm-up: %d %q", code, body)
	}
	// Kill the sandbox: its pooled connection is closed by the peer. The next
	// POST must not fail on the stale connection; it dials, is refused, and is
	// retried on the replacement with its body intact.
	old.CloseClientConnections()
	old.Close()
	if code, body := post(); code != 200 || body != "got payload" {
		t.Fatalf("after kill: %d %q", code, body)
	}
	deadline := time.Now().Add(5 * time.Second)
	for (tg.inflight.Load() != 0 || fresh.inflight.Load() != 0) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if res.calls.Load() != 1 || tg.inflight.Load() != 0 || fresh.inflight.Load() != 0 {
		t.Fatalf("retries=%d inflight old=%d new=%d", res.calls.Load(), tg.inflight.Load(), fresh.inflight.Load())
	}

	// With nothing to retry to, the client gets the resolver's failure.
	res2 := &fixedResolver{err: errors.New("still provisioning")}
	dead := newTarget(t, "http://127.0.0.1:1")
	p2 := New(Config{}, res2, errWriter, nil)
	gw2 := gatewayFor(t, p2, func() Upstream { return dead })
	resp, err := gw2.Client().Get(gw2.URL + "/v1/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("resolver failure: status %d", resp.StatusCode)
	}
	// A resolver that keeps returning dead upstreams ends in 502 after MaxRetries.
	res3 := &fixedResolver{next: dead}
	p3 := New(Config{MaxRetries: 2}, res3, errWriter, nil)
	gw3 := gatewayFor(t, p3, func() Upstream { return dead })
	resp, err = gw3.Client().Get(gw3.URL + "/v1/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || res3.calls.Load() != 2 {
		t.Fatalf("exhausted retries: status %d after %d retries", resp.StatusCode, res3.calls.Load())
	}
}

func TestHeaderHygiene(t *testing.T) {
	t.Parallel()
	seen := make(chan http.Header, 1)
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.Header().Set(sandboxspec.SecretHeader, "leak")
		w.Header().Set("X-Ok", "1")
	}))
	tg := newTarget(t, up.URL)
	p := New(Config{SandboxAPIKey: "sandbox-secret"}, &fixedResolver{}, errWriter, nil)
	gw := gatewayFor(t, p, func() Upstream { return tg })
	req, _ := http.NewRequest("GET", gw.URL+"/v1/x", nil)
	// Each as a client may spell it: the server canonicalises the names,
	// and the rewrite deletes the canonical forms.
	for _, name := range strippedRequestHeaders {
		req.Header[strings.ToLower(name)] = []string{"client-forged"}
	}
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "must-go")
	resp, err := gw.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h := <-seen
	for _, name := range append([]string{"X-Hop"}, strippedRequestHeaders...) {
		if v := h.Get(name); v != "" && name != sandboxspec.SecretHeader {
			t.Errorf("%s reached the sandbox: %q", name, v)
		}
	}
	if got := h.Get(sandboxspec.SecretHeader); got != "sandbox-secret" {
		t.Errorf("sandbox key = %q, want the configured one", got)
	}
	if got := h.Get("X-Forwarded-For"); got != "203.0.113.7, 127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q", got)
	}
	if h.Get("X-Forwarded-Host") == "" || h.Get("X-Forwarded-Proto") != "http" {
		t.Errorf("X-Forwarded-Host/Proto missing: %v", h)
	}
	if resp.Header.Get(sandboxspec.SecretHeader) != "" || resp.Header.Get("X-Ok") != "1" {
		t.Errorf("response headers: %v", resp.Header)
	}
}

func TestClientGoneClosesUpstreamRequest(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	ended := make(chan struct{})
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done() // the upstream sees the cancellation as a closed connection
		close(ended)
	}))
	tg := newTarget(t, up.URL)
	p := New(Config{}, &fixedResolver{}, errWriter, nil)
	gw := gatewayFor(t, p, func() Upstream { return tg })
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", gw.URL+"/v1/slow", nil)
	go func() { <-started; cancel() }()
	if _, err := gw.Client().Do(req); err == nil {
		t.Fatal("want an error after cancel")
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("upstream request not cancelled when the client left")
	}
}

func TestUpgradePassesThroughAndClosesOnDrain(t *testing.T) {
	t.Parallel()
	up := rawEcho(t) // 101, then echo every byte
	tg := newTarget(t, up.URL)
	p := New(Config{}, &fixedResolver{}, errWriter, nil)
	gw := gatewayFor(t, p, func() Upstream { return tg })

	conn, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /v1/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test-proto\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); fmt.Fprint(conn, "ping-1\n") }()
	line, err := br.ReadString('\n')
	wg.Wait()
	if err != nil || line != "ping-1\n" {
		t.Fatalf("echo through the upgrade: %q %v", line, err)
	}
	if n := p.Upgraded(); n != 1 {
		t.Fatalf("tracked upgraded connections = %d", n)
	}
	if n := p.CloseUpgraded(); n != 1 {
		t.Fatalf("closed %d upgraded connections", n)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadString('\n'); err == nil {
		t.Fatal("connection still open after drain")
	}
}

// A route retired while a request held it (its pool closed) is retried on
// the replacement like a dial failure: nothing was sent, so it is safe for
// any method, and the client never sees the pool's internal error.
func TestRetiredPoolIsRetriedOnTheReplacement(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "got %s", b)
	})
	retired := newTarget(t, newUpstream(t, h).URL)
	retired.rt.CloseIdleConnections()
	res := &fixedResolver{next: newTarget(t, newUpstream(t, h).URL)}
	gw := gatewayFor(t, New(Config{}, res, errWriter, nil), func() Upstream { return retired })
	resp, err := gw.Client().Post(gw.URL+"/v1/x", "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "got payload" || res.calls.Load() != 1 {
		t.Fatalf("POST on a retired route: %d %q after %d re-resolves", resp.StatusCode, b, res.calls.Load())
	}
}
