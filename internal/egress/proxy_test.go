package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

func TestForwardHTTP(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	f := newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}})
	body := strings.Repeat("x", 300<<10)
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://ALLOWED.test.:%d/echo?q=1", w.port), strings.NewReader(body))
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0OnNlY3JldA==")
	req.Header.Set("Proxy-Secret", "do not forward")
	req.Header.Set("X-Kept", "yes")
	resp, err := f.client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got echo
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, decode %v", resp.StatusCode, err)
	}
	if got.Method != "POST" || got.Path != "/echo?q=1" || got.BodyLen != int64(len(body)) || got.Header.Get("X-Kept") != "yes" {
		t.Fatalf("upstream saw %+v", got)
	}
	if want := fmt.Sprintf("allowed.test:%d", w.port); got.Host != want {
		t.Fatalf("upstream Host %q, want the checked name %q", got.Host, want)
	}
	for k := range got.Header {
		if strings.HasPrefix(k, "Proxy-") {
			t.Fatalf("upstream got %s", k)
		}
	}
	if dials := f.dials.all(); len(dials) != 1 || dials[0] != fmt.Sprintf("127.0.0.2:%d", w.port) {
		t.Fatalf("dials %v, want the checked address once", dials)
	}
	lines := f.logs.waitLines(t, 1)
	if len(lines) != 1 || lines[0]["decision"] != "allow" || lines[0]["reason"] != "ok" || lines[0]["sandbox_id"] != "sb-1" ||
		lines[0]["user"] != "alice" || lines[0]["thread"] != "th-1" || lines[0]["host"] != "allowed.test" || lines[0]["status"] != 200.0 {
		t.Fatalf("log lines %v", lines)
	}
	if d := f.rec.all(); !slices.Equal(d, []string{"allow/ok"}) {
		t.Fatalf("recorded %v", d)
	}
}

func TestConnectTLS(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	f := newFixture(t, w, backend.Egress{Allow: []string{fmt.Sprintf("allowed.test:%d", w.tlsPort)}})
	resp, err := f.client(w.roots).Get(fmt.Sprintf("https://allowed.test:%d/download", w.tlsPort))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || n != int64(len(download)) {
		t.Fatalf("status %d, %d bytes, %v", resp.StatusCode, n, err)
	}
	f.client(w.roots).Transport.(*http.Transport).CloseIdleConnections()
	f.p.Close(f.id.SandboxID) // ends the tunnel the client pooled
	lines := f.logs.waitLines(t, 1)
	if len(lines) != 1 || lines[0]["method"] != "CONNECT" || lines[0]["decision"] != "allow" || lines[0]["bytes_down"].(float64) < float64(len(download)) {
		t.Fatalf("log lines %v", lines)
	}
}

// Every refusal answers before any dial, with the reason and the host the
// client sent, and logs and records once.
func TestRefusals(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.port
	allow := []string{"allowed.test", "private.test", "meta.test", "rfc1918.test", "mapped.test", "v6local.test",
		"unknown.test", "*.wild.test", fmt.Sprintf("ported.test:%d", p), "teredo.test", "translated.test"}
	for _, c := range []struct {
		name, req string
		status    int
		reason    string
		host      string
	}{
		{"other name", get("http://other.test:%d/", p), 403, ReasonNotAllowed, "other.test"},
		{"other name connect", connect("other.test:443"), 403, ReasonNotAllowed, "other.test"},
		{"wildcard apex", get("http://wild.test:%d/", p), 403, ReasonNotAllowed, "wild.test"},
		{"loopback answer", get("http://private.test:%d/", p), 403, ReasonPrivateAddress, "private.test"},
		{"metadata answer", connect("meta.test:80"), 403, ReasonPrivateAddress, "meta.test"},
		{"metadata answer forward", get("http://meta.test/latest/meta-data/"), 403, ReasonPrivateAddress, "meta.test"},
		{"rfc1918 answer", connect("rfc1918.test:443"), 403, ReasonPrivateAddress, "rfc1918.test"},
		{"mapped loopback answer", connect("mapped.test:443"), 403, ReasonPrivateAddress, "mapped.test"},
		{"v6 loopback answer", connect("v6local.test:443"), 403, ReasonPrivateAddress, "v6local.test"},
		{"teredo answer", connect("teredo.test:443"), 403, ReasonPrivateAddress, "teredo.test"},
		{"ipv4-translated answer", connect("translated.test:443"), 403, ReasonPrivateAddress, "translated.test"},
		{"teredo answer forward", get("http://teredo.test/"), 403, ReasonPrivateAddress, "teredo.test"},
		{"ipv4 literal", get("http://127.0.0.2:%d/", p), 403, ReasonIPLiteral, "127.0.0.2"},
		{"ipv4 literal connect", connect(fmt.Sprintf("127.0.0.2:%d", p)), 403, ReasonIPLiteral, "127.0.0.2"},
		{"ipv6 literal", get("http://[::1]:%d/", p), 403, ReasonIPLiteral, "::1"},
		{"ipv6 literal connect", connect("[::ffff:127.0.0.2]:443"), 403, ReasonIPLiteral, "::ffff:127.0.0.2"},
		{"ipv6 literal no port", get("http://[fe80::1]/"), 403, ReasonIPLiteral, "[fe80::1]"},
		{"decimal address", get("http://2130706433/"), 403, ReasonIPLiteral, "2130706433"},
		{"short address", connect("127.1:443"), 403, ReasonIPLiteral, "127.1"},
		{"wrong port", get("http://ported.test:%d/", p+1), 403, ReasonNotAllowed, "ported.test"},
		{"connect without port", connect("allowed.test"), 400, ReasonBadRequest, "allowed.test"},
		{"port zero", connect("allowed.test:0"), 400, ReasonBadRequest, "allowed.test"},
		{"port too big", connect("allowed.test:70000"), 400, ReasonBadRequest, "allowed.test"},
		{"https forward", get("https://allowed.test/"), 400, ReasonBadRequest, "allowed.test"},
		{"origin form", "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400, ReasonBadRequest, "allowed.test"},
		{"connect path", "CONNECT /x HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n", 400, ReasonBadRequest, ""},
		{"nxdomain", connect("unknown.test:443"), 502, ReasonResolveFailed, "unknown.test"},
		// The URL decides, whatever the Host header says.
		{"host header spoof", fmt.Sprintf("GET http://other.test:%d/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", p), 403, ReasonNotAllowed, "other.test"},
		{"connect host spoof", "CONNECT other.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n", 403, ReasonNotAllowed, "other.test"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var denied []string
			f := newFixture(t, w, backend.Egress{Allow: allow}, func(cfg *Config) {
				cfg.Denied = func(id backend.EgressIdentity, host, reason string) {
					mu.Lock()
					defer mu.Unlock()
					denied = append(denied, id.SandboxID+" "+id.User+" "+id.Thread+" "+host+" "+reason)
				}
			})
			resp, body := f.raw(t, c.req)
			var got struct{ Reason, Host string }
			if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != c.status || got.Reason != c.reason || got.Host != c.host {
				t.Fatalf("%d %s, want %d %s host %q", resp.StatusCode, body, c.status, c.reason, c.host)
			}
			if strings.Contains(string(body), "127.0.0.1") || strings.Contains(string(body), "169.254") {
				t.Fatalf("body names a resolved address: %s", body)
			}
			if d := f.dials.all(); len(d) != 0 {
				t.Fatalf("dialled %v", d)
			}
			lines := f.logs.waitLines(t, 1)
			if len(lines) != 1 || lines[0]["decision"] != "deny" || lines[0]["reason"] != c.reason || lines[0]["sandbox_id"] != "sb-1" {
				t.Fatalf("log lines %v", lines)
			}
			if d := f.rec.all(); !slices.Equal(d, []string{"deny/" + c.reason}) {
				t.Fatalf("recorded %v", d)
			}
			// A policy refusal (403) is told to Denied, for its event;
			// a malformed request or a failed lookup is no denial.
			var want []string
			if c.status == 403 {
				want = []string{"sb-1 alice th-1 " + c.host + " " + c.reason}
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(denied, want) {
				t.Fatalf("Denied heard %q, want %q", denied, want)
			}
		})
	}
}

func get(format string, args ...any) string {
	return "GET " + fmt.Sprintf(format, args...) + " HTTP/1.1\r\nHost: ignored.example\r\n\r\n"
}

func connect(authority string) string {
	return "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"
}

func TestAllowedVariants(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	p := w.port
	allow := []string{"allowed.test", "*.wild.test", "allowed6.test", fmt.Sprintf("ported.test:%d", p)}
	for _, c := range []struct{ name, req, host string }{
		{"wildcard", get("http://a.wild.test:%d/", p), fmt.Sprintf("a.wild.test:%d", p)},
		{"port entry", get("http://ported.test:%d/", p), fmt.Sprintf("ported.test:%d", p)},
		{"mapped exception", get("http://allowed6.test:%d/", p), fmt.Sprintf("allowed6.test:%d", p)},
		{"spoofed host header", fmt.Sprintf("GET http://allowed.test:%d/ HTTP/1.1\r\nHost: other.test\r\n\r\n", p), fmt.Sprintf("allowed.test:%d", p)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var denied []string
			f := newFixture(t, w, backend.Egress{Allow: allow}, func(cfg *Config) {
				cfg.Denied = func(id backend.EgressIdentity, host, reason string) {
					mu.Lock()
					defer mu.Unlock()
					denied = append(denied, id.SandboxID+" "+id.User+" "+id.Thread+" "+host+" "+reason)
				}
			})
			resp, body := f.raw(t, c.req)
			var got echo
			if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 || got.Host != c.host {
				t.Fatalf("%d %s, want 200 with Host %q", resp.StatusCode, body, c.host)
			}
		})
	}
}

func TestUpstreamFailures(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	closed, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	port := portOf(t, "http://"+closed.Addr().String())
	closed.Close()
	f := newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}})
	resp, body := f.raw(t, get("http://allowed.test:%d/", port))
	if resp.StatusCode != 502 || !strings.Contains(string(body), ReasonDialFailed) {
		t.Fatalf("forward: %d %s, want 502 dial_failed", resp.StatusCode, body)
	}
	if d := f.dials.all(); len(d) != 1 || d[0] != closed.Addr().String() {
		t.Fatalf("dials %v", d)
	}
	// A tunnel is answered before its ClientHello, so before its dial: a
	// dial that fails ends it, and the log says why.
	f = newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}})
	c, br := openTunnel(t, f, fmt.Sprintf("allowed.test:%d", port))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("tunnel with a failed dial: %v %v, want EOF", b, err)
	}
	if d := f.dials.all(); len(d) != 1 || d[0] != closed.Addr().String() {
		t.Fatalf("dials %v", d)
	}
	if lines := f.logs.waitLines(t, 1); len(lines) != 1 || lines[0]["reason"] != ReasonDialFailed {
		t.Fatalf("log lines %v", lines)
	}
}

// Every address a name resolves to must pass: one private answer among
// public ones refuses the name.
func TestAnyRefusedAnswerRefuses(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	f := newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}}, func(c *Config) {
		c.DNSServer, c.Resolver = "", fakeResolver{upstreamIP, netip.MustParseAddr("10.9.9.9")}
	})
	resp, body := f.raw(t, connect("allowed.test:443"))
	if resp.StatusCode != 403 || !strings.Contains(string(body), ReasonPrivateAddress) || len(f.dials.all()) != 0 {
		t.Fatalf("%d %s, dials %v", resp.StatusCode, body, f.dials.all())
	}
}

func TestModeNone(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	f := newFixture(t, w, backend.Egress{Mode: backend.EgressNone, Allow: []string{"allowed.test"}})
	for _, req := range []string{get("http://allowed.test:%d/", w.port), connect("allowed.test:443")} {
		if resp, body := f.raw(t, req); resp.StatusCode != 403 || !strings.Contains(string(body), ReasonModeNone) {
			t.Fatalf("%q: %d %s", req, resp.StatusCode, body)
		}
	}
}

func TestServeAuth(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	f := newFixture(t, w, backend.Egress{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		served <- f.p.ServeAuth(ln, func(id, password string, source netip.Addr) (backend.EgressIdentity, bool) {
			if id != "pod-1" || password != "s3cret" || source != netip.MustParseAddr("127.0.0.1") {
				return backend.EgressIdentity{}, false
			}
			return backend.EgressIdentity{SandboxID: id, Egress: backend.Egress{Allow: []string{"allowed.test"}}}, true
		})
	}()
	target := fmt.Sprintf("http://allowed.test:%d/", w.port)
	for _, c := range []struct {
		name, auth string
		status     int
	}{
		{"none", "", 407},
		{"wrong password", "pod-1:nope", 407},
		{"other sandbox", "pod-2:s3cret", 407},
		{"not basic", "", 407},
		{"right", "pod-1:s3cret", 200},
	} {
		req, _ := http.NewRequest("GET", target, nil)
		tr := &http.Transport{Proxy: http.ProxyURL(mustURL(t, "http://"+ln.Addr().String()))}
		if c.auth != "" {
			user, pass, _ := strings.Cut(c.auth, ":")
			tr.Proxy = http.ProxyURL(mustURL(t, "http://"+user+":"+pass+"@"+ln.Addr().String()))
		}
		if c.name == "not basic" {
			req.Header.Set("Proxy-Authorization", "Bearer pod-1:s3cret")
		}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || c.status == 407 && !strings.HasPrefix(resp.Header.Get("Proxy-Authenticate"), "Basic ") {
			t.Fatalf("%s: %d %v", c.name, resp.StatusCode, resp.Header)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("ServeAuth after Shutdown: %v", err)
	}
	if err := f.p.Open(f.id, f.socket); err != ErrClosed {
		t.Fatalf("Open after Shutdown: %v", err)
	}
	// The file stays (a sandbox keeps its path; the next gateway listens
	// there again), but nothing answers on it.
	if c, err := net.Dial("unix", f.socket); err == nil {
		c.Close()
		t.Fatal("socket still answers after Shutdown")
	}
}

func TestOpenAndClose(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	f := newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}})
	fi, err := os.Stat(f.socket)
	if err != nil || fi.Mode().Perm() != 0o666 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket %v %v", fi, err)
	}
	// Serving holds the listener only, not its directory: a descriptor
	// per sandbox counts against the gateway's file limit.
	if n := openDescriptorsOf(t, filepath.Dir(f.socket)); n != 0 {
		t.Fatalf("%d descriptors of the socket's directory held while serving", n)
	}
	// A second Open for the same sandbox (an adopted sandbox) replaces the first.
	if err := f.p.Open(f.id, f.socket); err != nil {
		t.Fatal(err)
	}
	if resp, _ := f.raw(t, get("http://allowed.test:%d/", w.port)); resp.StatusCode != 200 {
		t.Fatalf("after reopen: %d", resp.StatusCode)
	}
	f.p.Close(f.id.SandboxID)
	if _, err := os.Lstat(f.socket); !os.IsNotExist(err) {
		t.Fatalf("socket left after Close: %v", err)
	}
	// A stale socket from an earlier process is replaced.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: f.socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	if err := f.p.Open(f.id, f.socket); err != nil {
		t.Fatalf("open over a stale socket: %v", err)
	}
	if resp, _ := f.raw(t, get("http://allowed.test:%d/", w.port)); resp.StatusCode != 200 {
		t.Fatalf("after stale: %d", resp.StatusCode)
	}
	// Anything else at the path is left alone.
	plain := filepath.Join(t.TempDir(), "not-a-socket")
	os.WriteFile(plain, []byte("keep"), 0o600)
	if err := f.p.Open(backend.EgressIdentity{SandboxID: "sb-2"}, plain); err == nil {
		t.Fatal("Open replaced a regular file")
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep" {
		t.Fatal("regular file changed")
	}
	if err := f.p.Open(backend.EgressIdentity{SandboxID: "sb-3", Egress: backend.Egress{Mode: "wide"}}, plain+".sock"); err == nil {
		t.Fatal("Open accepted an invalid policy")
	}
}

// openTunnel connects through the proxy to addr and returns the tunnel.
// openTunnel opens a tunnel to authority and sends the ClientHello of its
// host, as a TLS client would: what the upstream reads starts with it.
func openTunnel(t testing.TB, f *fixture, authority string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, connect(authority))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", authority, resp, err)
	}
	host, _, _ := net.SplitHostPort(authority)
	if _, err := c.Write(clientHello(t, host)); err != nil {
		t.Fatal(err)
	}
	return c, br
}

// A tunnel stays up while either direction moves, and ends once both are
// quiet for the idle timeout.
func TestTunnelIdle(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // ten ticks 100 ms apart, then silence
				for range 10 {
					c.Write([]byte("t"))
					time.Sleep(100 * time.Millisecond)
				}
			}()
		}
	}()
	// The idle timeout is ten tick intervals: a tick delayed by a loaded
	// machine must not pass for silence (at 200 ms against 60 ms ticks it
	// did, once in CI).
	const idle = time.Second
	f := newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}}, func(c *Config) { c.IdleTimeout = idle })
	c, br := openTunnel(t, f, "allowed.test:"+portString(ln))
	began := time.Now()
	got, err := io.ReadAll(br)
	took := time.Since(began)
	if string(got) != "tttttttttt" || err != nil {
		t.Fatalf("read %q %v: the quiet client direction ended the tunnel", got, err)
	}
	if took < 1500*time.Millisecond || took > 6*time.Second {
		t.Fatalf("tunnel ended after %v, want ~%v after the last tick", took, idle)
	}
	c.Close()
}

func portString(ln net.Listener) string {
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

// Close ends a sandbox's tunnels; a half-closed client still gets its answer.
func TestTunnelCloseAndHalfClose(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	up := startCountingUpstream(t) // echoes what it got once the client half-closed
	f := newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}})
	authority := fmt.Sprintf("allowed.test:%d", up.port())
	c, br := openTunnel(t, f, authority)
	io.WriteString(c, "ping")
	c.(*net.UnixConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(br)
	if err != nil || len(got) < 6 || got[0] != 22 || !bytes.HasSuffix(got, []byte("ping")) {
		t.Fatalf("through a half-closed tunnel: %q %v", got, err)
	}

	c2, br2 := openTunnel(t, f, authority)
	for deadline := time.Now().Add(5 * time.Second); up.accepted.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond) // the tunnel is up once its hello passed
	}
	f.p.Close(f.id.SandboxID)
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br2.ReadByte(); err != io.EOF {
		t.Fatalf("tunnel after Close: %v, want EOF", err)
	}
}

// What a client sends in the same write as its ClientHello reaches the
// upstream too, however much of it the proxy read while it checked the
// name: some in the TLS reader's buffer, some in the hijacked connection's,
// the rest still in the socket.
func TestTunnelKeepsBytesAfterTheHello(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	up := startCountingUpstream(t) // echoes what it got once the client half-closed
	f := newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}})
	for _, size := range []int{10, 3000, 100 << 10} {
		c, err := net.Dial("unix", f.socket)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, connect(fmt.Sprintf("allowed.test:%d", up.port())))
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		want := append(clientHello(t, "allowed.test"), bytes.Repeat([]byte("e"), size)...)
		go func() {
			c.Write(want)
			c.(*net.UnixConn).CloseWrite()
		}()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(br)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%d bytes after the hello: the upstream got %d of %d (%v)", size, len(got), len(want), err)
		}
	}
}

// Bodies stream both ways: the upstream reads the start of an upload while
// the client still holds the rest, and the client reads the start of a
// response while the upstream still holds the rest.
func TestForwardStreams(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	gotFirst, sendRest := make(chan struct{}), make(chan struct{})
	up := startOn(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil || string(buf) != "part1" {
			t.Errorf("upstream read %q %v", buf, err)
		}
		close(gotFirst)
		rest, _ := io.ReadAll(r.Body)
		io.WriteString(rw, "head:"+string(rest)+";")
		rw.(http.Flusher).Flush()
		<-sendRest
		io.WriteString(rw, "tail")
	}), nil)
	f := newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}})
	body, bodyW := io.Pipe()
	req, _ := http.NewRequest("POST", fmt.Sprintf("http://allowed.test:%d/", portOf(t, up.URL)), body)
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := f.client(nil).Do(req)
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	io.WriteString(bodyW, "part1")
	select {
	case <-gotFirst:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream got nothing of the upload before it ended: buffered")
	}
	io.WriteString(bodyW, "part2")
	bodyW.Close()
	resp := <-done
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	head := make([]byte, len("head:part2;"))
	if _, err := io.ReadFull(resp.Body, head); err != nil || string(head) != "head:part2;" {
		t.Fatalf("first part %q %v", head, err)
	}
	close(sendRest)
	if tail, err := io.ReadAll(resp.Body); err != nil || string(tail) != "tail" {
		t.Fatalf("tail %q %v", tail, err)
	}
}

// A panic while serving ends that connection without an answer (never a
// 500) and is logged; the proxy serves the next connection.
func TestPanicIsContained(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	f := newFixture(t, w, backend.Egress{Allow: []string{"allowed.test"}}, func(c *Config) {
		c.DNSServer, c.Resolver = "", panicResolver{}
	})
	c, err := net.Dial("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, connect("allowed.test:443"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(c); len(b) != 0 || err != nil {
		t.Fatalf("got %q %v, want the connection closed without an answer", b, err)
	}
	if resp, _ := f.raw(t, connect("other.test:443")); resp.StatusCode != 403 {
		t.Fatalf("next connection: %d", resp.StatusCode)
	}
	if !strings.Contains(f.logs.String(), `"msg":"egress: panic"`) {
		t.Fatalf("panic not logged: %s", f.logs.String())
	}
}

type panicResolver struct{}

func (panicResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	panic("resolver bug")
}

// openDescriptorsOf counts this process's descriptors of path.
func openDescriptorsOf(t *testing.T, path string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && target == path {
			n++
		}
	}
	return n
}
