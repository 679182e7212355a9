package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/egress/egresstest"
	"github.com/sandgate/sandgate/internal/testutil"
)

// upstreamIP is where the test servers listen: loopback, so refused unless
// the proxy's AllowAddresses says otherwise, as the tests' configs do.
var upstreamIP = netip.MustParseAddr("127.0.0.2")

// world is what the proxy under test reaches: a DNS server and HTTP(S)
// servers on 127.0.0.2.
type world struct {
	dns        string
	http, tls  *httptest.Server
	port       uint16 // http's
	tlsPort    uint16
	httpClient *http.Client // for tls, trusting its certificate
}

// names the test DNS server answers.
var testNames = map[string]netip.Addr{
	"allowed.test":  upstreamIP,
	"other.test":    upstreamIP,
	"ported.test":   upstreamIP,
	"a.wild.test":   upstreamIP,
	"wild.test":     upstreamIP,
	"private.test":  netip.MustParseAddr("127.0.0.1"),
	"meta.test":     netip.MustParseAddr("169.254.169.254"),
	"rfc1918.test":  netip.MustParseAddr("10.0.0.1"),
	"mapped.test":   netip.MustParseAddr("::ffff:127.0.0.1"),
	"v6local.test":  netip.MustParseAddr("::1"),
	"allowed6.test": netip.MustParseAddr("::ffff:127.0.0.2"),
}

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{dns: egresstest.StartDNS(t, testNames)}
	w.http = startOn(t, upstreamHandler(), false)
	w.tls = startOn(t, upstreamHandler(), true)
	w.port, w.tlsPort = portOf(t, w.http.URL), portOf(t, w.tls.URL)
	return w
}

func startOn(t testing.TB, h http.Handler, tls bool) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(upstreamIP, 0).String())
	if err != nil {
		t.Fatalf("listen on %s (loopback beyond 127.0.0.1): %v", upstreamIP, err)
	}
	s := httptest.NewUnstartedServer(h)
	s.Listener.Close()
	s.Listener = ln
	if tls {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

func portOf(t testing.TB, raw string) uint16 {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return uint16(p)
}

// download is what /download serves.
var download = bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB

// upstreamHandler echoes what arrived as JSON, or serves /download.
func upstreamHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/download" {
			w.Header().Set("Content-Length", strconv.Itoa(len(download)))
			w.Write(download)
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		json.NewEncoder(w).Encode(echo{Method: r.Method, Host: r.Host, Path: r.URL.RequestURI(), Header: r.Header, BodyLen: n})
	})
}

type echo struct {
	Method, Host, Path string
	Header             http.Header
	BodyLen            int64
}

// fixture is one proxy serving one sandbox on a Unix socket.
type fixture struct {
	p      *Proxy
	socket string
	id     backend.EgressIdentity
	logs   *logBuffer
	rec    *recorder
	dials  *dialLog
}

type option func(*Config)

func newFixture(t testing.TB, w *world, e backend.Egress, opts ...option) *fixture {
	t.Helper()
	f := &fixture{logs: &logBuffer{}, rec: &recorder{}, dials: &dialLog{},
		id: backend.EgressIdentity{SandboxID: "sb-1", User: "alice", Thread: "th-1", Egress: e}}
	cfg := Config{DNSServer: w.dns, AllowAddresses: []netip.Prefix{netip.PrefixFrom(upstreamIP, 32)},
		Log: slog.New(slog.NewJSONHandler(f.logs, nil)), Recorder: f.rec, Dial: f.dials.dial}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	f.socket = filepath.Join(t.TempDir(), "egress.sock")
	if err := p.Open(f.id, f.socket); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Shutdown(ctx)
	})
	return f
}

// client is an HTTP client whose proxy is the fixture's socket.
func (f *fixture) client(tlsFrom *httptest.Server) *http.Client {
	tr := &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "egress.invalid"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", f.socket)
		},
	}
	if tlsFrom != nil {
		tr.TLSClientConfig = tlsFrom.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		tr.TLSClientConfig.ServerName = "example.com" // httptest's certificate
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// raw sends raw bytes on a new connection to the socket and reads one response.
func (f *fixture) raw(t testing.TB, req string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp, body
}

// logBuffer collects JSON log lines.
type logBuffer struct{ testutil.LogBuffer }

func (l *logBuffer) egressLines(t testing.TB) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, raw := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if raw == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatalf("log line %q: %v", raw, err)
		}
		if m["msg"] == "egress" {
			lines = append(lines, m)
		}
	}
	return lines
}

// waitLines waits for n egress lines (a tunnel logs when it ends).
func (l *logBuffer) waitLines(t testing.TB, n int) []map[string]any {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if lines := l.egressLines(t); len(lines) >= n || time.Now().After(deadline) {
			return lines
		}
	}
}

type recorder struct {
	mu        sync.Mutex
	decisions []string
}

func (r *recorder) EgressDecision(allowed bool, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := "deny/"
	if allowed {
		d = "allow/"
	}
	r.decisions = append(r.decisions, d+reason)
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.decisions...)
}

// dialLog records every dial the proxy makes, then dials.
type dialLog struct {
	mu    sync.Mutex
	addrs []string
}

func (d *dialLog) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.addrs = append(d.addrs, addr)
	d.mu.Unlock()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, errors.New("test: the proxy dialled a name: " + addr)
	}
	// Test traffic stays on loopback, even when a broken check lets
	// 169.254.169.254 or 10.0.0.1 through.
	if !ap.Addr().Unmap().IsLoopback() {
		return nil, errors.New("test: not dialling " + addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *dialLog) all() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.addrs...)
}

// fakeResolver answers every name with its addresses.
type fakeResolver []netip.Addr

func (r fakeResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return r, nil
}

func mustURL(t testing.TB, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
