package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	dns       string
	http, tls *httptest.Server
	port      uint16 // http's
	tlsPort   uint16
	roots     *x509.CertPool // trusts tls's certificate, which names allowed.test
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
	// Teredo (a public IPv4 server and client hidden in it) and SIIT's
	// IPv4-translated form of a public address: both reach IPv4 hosts
	// through a relay the check cannot see past.
	"teredo.test":     netip.MustParseAddr("2001:0:4136:e378:8000:63bf:3fff:fdd2"),
	"translated.test": netip.MustParseAddr("::ffff:0:808:808"),
}

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{dns: egresstest.StartDNS(t, testNames)}
	cert, roots := testCert(t, "allowed.test")
	w.roots = roots
	w.http = startOn(t, upstreamHandler(), nil)
	w.tls = startOn(t, upstreamHandler(), &cert)
	w.port, w.tlsPort = portOf(t, w.http.URL), portOf(t, w.tls.URL)
	return w
}

// startOn serves h on upstreamIP, over TLS with cert if it is given.
func startOn(t testing.TB, h http.Handler, cert *tls.Certificate) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(upstreamIP, 0).String())
	if err != nil {
		t.Fatalf("listen on %s (loopback beyond 127.0.0.1): %v", upstreamIP, err)
	}
	s := httptest.NewUnstartedServer(h)
	s.Listener.Close()
	s.Listener = ln
	if cert != nil {
		s.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
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

// client is an HTTP client whose proxy is the fixture's socket, trusting
// roots for https.
func (f *fixture) client(roots *x509.CertPool) *http.Client {
	tr := &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "egress.invalid"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", f.socket)
		},
	}
	if roots != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
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

// testCert is a self-signed certificate for names, and a pool trusting it.
func testCert(t testing.TB, names ...string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: names, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots
}

// clientHello is the first TLS record a real client (crypto/tls) sends for
// sni ("" = no server name), taken from a handshake it never finishes.
func clientHello(t testing.TB, sni string) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer b.Close()
	go func() {
		defer a.Close()
		tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: sni == ""}).Handshake() //nolint:errcheck // cut short on purpose
	}()
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(b, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(b, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr, body...)
}

// countingUpstream is a loopback server that counts the connections it
// accepts and keeps what each sent (until the client half-closes), which
// it then echoes back.
type countingUpstream struct {
	ln       net.Listener
	accepted atomic.Int64
	mu       sync.Mutex
	got      [][]byte
}

func startCountingUpstream(t testing.TB) *countingUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(upstreamIP, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	u := &countingUpstream{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.accepted.Add(1)
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				b, _ := io.ReadAll(c)
				u.mu.Lock()
				u.got = append(u.got, b)
				u.mu.Unlock()
				c.Write(b)
			}()
		}
	}()
	return u
}

func (u *countingUpstream) port() uint16 { return uint16(u.ln.Addr().(*net.TCPAddr).Port) }

func (u *countingUpstream) received() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]byte(nil), u.got...)
}
