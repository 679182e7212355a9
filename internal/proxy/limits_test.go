package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// endless yields n bytes and counts what was read from it.
type endless struct {
	left, read int64
}

func (e *endless) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), e.left)
	for i := range p[:n] {
		p[i] = 'x'
	}
	e.left -= n
	atomic.AddInt64(&e.read, n)
	return int(n), nil
}

func TestBodyLimitStopsAStreamedBody(t *testing.T) {
	t.Parallel()
	var got atomic.Int64
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Store(n)
	}))
	tg := newTarget(t, up.URL)
	const limit = 1 << 20
	p := New(Config{MaxBodyBytes: limit}, &fixedResolver{}, errWriter, nil)
	gw := gatewayFor(t, p, func() Upstream { return tg })

	// Chunked (no declared length): counted while streaming, cut past the limit.
	body := &endless{left: 256 << 20}
	req, _ := http.NewRequest("POST", gw.URL+"/v1/file/upload", body)
	req.ContentLength = -1
	start := time.Now()
	resp, err := gw.Client().Do(req)
	if err != nil {
		t.Fatalf("streamed body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("streamed body: %d, want 413", resp.StatusCode)
	}
	if n := atomic.LoadInt64(&body.read); n > 64<<20 {
		t.Errorf("the client sent %d MiB before the 413", n>>20)
	}
	if n := got.Load(); n > limit {
		t.Errorf("the sandbox received %d bytes, over the %d limit", n, limit)
	}
	t.Logf("413 after %s, client sent %d KiB", time.Since(start), atomic.LoadInt64(&body.read)>>10)

	// Exactly the limit passes.
	resp, err = gw.Client().Post(gw.URL+"/v1/file/upload", "application/octet-stream", &endless{left: limit})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || got.Load() != limit {
		t.Fatalf("a body of exactly the limit: %d, sandbox got %d", resp.StatusCode, got.Load())
	}

	// A declared length over the limit is refused before anything is read.
	req, _ = http.NewRequest("POST", gw.URL+"/x", nil)
	req.ContentLength = 2 << 30
	if err := p.TooLarge(req); err == nil {
		t.Fatal("declared 2 GiB passed TooLarge")
	}
	req.ContentLength = limit
	if err := p.TooLarge(req); err != nil {
		t.Fatalf("declared limit refused: %v", err)
	}
}

// rawEcho is an upstream that answers any request with 101 and then
// echoes every byte.
func rawEcho(t *testing.T) *upstream {
	return newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test-proto\r\n\r\n")
		brw.Flush()
		_, _ = io.Copy(conn, brw)
	}))
}

// upgrade opens an upgraded connection through gw; status is the answer's.
func upgrade(t *testing.T, gw *httptest.Server) (net.Conn, *bufio.Reader, int) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(gw.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprint(conn, "GET /v1/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test-proto\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	return conn, br, resp.StatusCode
}

// closedWithin reports how long the gateway took to close conn (reading
// until EOF), or fails after limit.
func closedWithin(t *testing.T, conn net.Conn, br *bufio.Reader, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(limit))
	for {
		if _, err := br.ReadByte(); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("still open after %s", limit)
			}
			return time.Since(start)
		}
	}
}

func TestUpgradedConnectionLimits(t *testing.T) {
	t.Parallel()
	tg := newTarget(t, rawEcho(t).URL)
	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		p := New(Config{WSIdleTimeout: 1500 * time.Millisecond}, &fixedResolver{}, errWriter, nil)
		gw := gatewayFor(t, p, func() Upstream { return tg })
		conn, br, code := upgrade(t, gw)
		if code != 101 {
			t.Fatalf("status %d", code)
		}
		// Traffic keeps it open past the idle timeout...
		for range 8 {
			time.Sleep(250 * time.Millisecond)
			fmt.Fprint(conn, "x\n")
			if line, err := br.ReadString('\n'); err != nil || line != "x\n" {
				t.Fatalf("echo: %q %v", line, err)
			}
		}
		// ...silence closes it.
		if took := closedWithin(t, conn, br, 10*time.Second); took < time.Second {
			t.Errorf("closed after %s of silence, before the idle timeout", took)
		}
		waitUntil(t, func() bool { return p.Upgraded() == 0 })
	})
	t.Run("lifetime", func(t *testing.T) {
		t.Parallel()
		p := New(Config{WSMaxLifetime: 500 * time.Millisecond}, &fixedResolver{}, errWriter, nil)
		gw := gatewayFor(t, p, func() Upstream { return tg })
		conn, br, _ := upgrade(t, gw)
		start := time.Now()
		stop := make(chan struct{})
		defer close(stop)
		go func() { // busy all along
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
					fmt.Fprint(conn, "y\n")
				}
			}
		}()
		closedWithin(t, conn, br, 10*time.Second)
		if took := time.Since(start); took < 450*time.Millisecond {
			t.Errorf("closed after %s, before its lifetime", took)
		}
	})
	t.Run("cap", func(t *testing.T) {
		t.Parallel()
		p := New(Config{MaxUpgraded: 1}, &fixedResolver{}, errWriter, nil)
		gw := gatewayFor(t, p, func() Upstream { return tg })
		first, _, code := upgrade(t, gw)
		if code != 101 {
			t.Fatalf("first: %d", code)
		}
		if _, _, code := upgrade(t, gw); code != http.StatusServiceUnavailable {
			t.Fatalf("second over the cap: %d, want 503", code)
		}
		first.Close()
		waitUntil(t, func() bool { _, _, code := upgrade(t, gw); return code == 101 })
	})
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestGatewayKeyAndProxyPort(t *testing.T) {
	t.Parallel()
	seen := make(chan http.Header, 1)
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		h.Set("X-Test-Uri", r.RequestURI)
		seen <- h
	})
	inner, sandbox := newUpstream(t, record), newUpstream(t, record)
	innerTarget := newTarget(t, inner.URL+"/sandboxes/0123456789abcdef")
	sandboxTarget := newTarget(t, sandbox.URL)
	p := New(Config{GatewayOrigin: inner.URL, GatewayKey: "inner-key", SandboxAPIKey: "sbx"}, &fixedResolver{}, errWriter, nil)
	var current atomic.Pointer[target]
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.Serve(w, r, current.Load(), r.URL.Path, r.URL.RawPath, r.URL.Query().Get("port"))
	}))
	t.Cleanup(gw.Close)
	send := func(tg *target, query string) http.Header {
		t.Helper()
		current.Store(tg)
		req, _ := http.NewRequest("GET", gw.URL+"/v1/x"+query, nil)
		req.Header.Set("Authorization", "Bearer client-token")
		req.Header.Set(ProxyPortHeader, "22")
		resp, err := gw.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return <-seen
	}
	h := send(innerTarget, "")
	if got := h.Get("Authorization"); got != "Bearer inner-key" {
		t.Errorf("the inner gateway got Authorization %q, want its key", got)
	}
	h = send(sandboxTarget, "?port=6080")
	if got := h.Get("Authorization"); got != "" {
		t.Errorf("a sandbox got Authorization %q", got)
	}
	if got, uri := h.Get(ProxyPortHeader), h.Get("X-Test-Uri"); got != "" || uri != sandboxspec.PortPath("6080")+"/v1/x?port=6080" {
		t.Errorf("port 6080 reached %s with %s %q, want the sandbox server's bridge and no client selector", uri, ProxyPortHeader, got)
	}
	if h = send(sandboxTarget, ""); h.Get(ProxyPortHeader) != "" {
		t.Errorf("the client's %s reached the sandbox: %q", ProxyPortHeader, h.Get(ProxyPortHeader))
	}
}
