package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandgate/sandgate/internal/egress/egresstest"
)

// The egress boundary of issue 18. Every address here is the test's own: an
// origin on 127.0.0.2 (allowed by egress_allow_addresses, standing in for a
// public site), names answered by a DNS server on loopback, and names that
// resolve to 127.0.0.1 and 169.254.169.254, which the proxy must refuse
// after its own DNS answer, before it dials anything.

// egressWorld is the test's little internet.
type egressWorld struct {
	dns     string
	port    int
	tlsPort int          // the same origin over TLS (httptest's certificate: clients skip verification)
	hits    atomic.Int64 // requests the origin served
}

const originBody = "hello from the allowed origin"

func newEgressWorld(t *testing.T) *egressWorld {
	t.Helper()
	w := &egressWorld{}
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatalf("origin on 127.0.0.2: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.hits.Add(1)
		_, _ = io.WriteString(rw, originBody)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	w.port = ln.Addr().(*net.TCPAddr).Port
	tlsLn, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatalf("TLS origin on 127.0.0.2: %v", err)
	}
	ts := httptest.NewUnstartedServer(srv.Handler)
	ts.Listener.Close()
	ts.Listener = tlsLn
	ts.StartTLS()
	t.Cleanup(ts.Close)
	w.tlsPort = tlsLn.Addr().(*net.TCPAddr).Port
	w.dns = egresstest.StartDNS(t, map[string]netip.Addr{
		"example.internal": netip.MustParseAddr("127.0.0.2"),
		"other.internal":   netip.MustParseAddr("127.0.0.2"),
		"loop.internal":    netip.MustParseAddr("127.0.0.1"),
		"meta.internal":    netip.MustParseAddr("169.254.169.254"),
	})
	return w
}

// flags configure the proxy mode with loop.internal and meta.internal
// allow-listed by name, so only the address check can refuse them.
func (w *egressWorld) flags(mode string) []string {
	return []string{"--egress", mode, "--egress-allow", "example.internal,loop.internal,meta.internal",
		"--egress-dns", w.dns, "--egress-allow-addresses", "127.0.0.2/32"}
}

func (w *egressWorld) url(host string) string {
	return "http://" + host + ":" + strconv.Itoa(w.port) + "/"
}

func (w *egressWorld) tlsURL(host string) string {
	return "https://" + host + ":" + strconv.Itoa(w.tlsPort) + "/"
}

// TestProcessEgressThroughTheProxy: an isolated process sandbox has
// loopback only; curl finds the proxy through HTTP_PROXY, bridged to the
// gateway's socket.
func TestProcessEgressThroughTheProxy(t *testing.T) {
	t.Parallel()
	w := newEgressWorld(t)
	f := newFleet(t, w.flags("proxy")...)
	g := f.start()
	const th = "egress-proc"

	// Allowed: forward (http) and a CONNECT tunnel carrying TLS for the
	// allowed name (https_proxy).
	for _, u := range []string{w.url("example.internal"), w.tlsURL("example.internal")} {
		out, code := run(t, g, th, "curl -sS -k -m 20 "+u)
		if code != 0 || !strings.Contains(out, originBody) {
			t.Fatalf("allowed domain (%s): exit %d: %s", u, code, out)
		}
	}
	served := w.hits.Load()
	if served != 2 {
		t.Fatalf("origin served %d requests, want 2", served)
	}
	// A tunnel must carry TLS for the name it was allowed for: plain HTTP
	// inside one (-p), whose Host the sandbox would choose, is refused.
	if out, code := run(t, g, th, "curl -sS -m 20 -p "+w.url("example.internal")); code == 0 || strings.Contains(out, originBody) || w.hits.Load() != served {
		t.Fatalf("plain HTTP through a tunnel reached the origin: exit %d: %s", code, out)
	}
	// Denied by name, and by address after the proxy's own DNS answer.
	for host, reason := range map[string]string{"other.internal": "not_allowed", "loop.internal": "private_address", "meta.internal": "private_address"} {
		out, _ := run(t, g, th, "curl -sS -m 20 -w ' status=%{http_code}' "+w.url(host))
		if !strings.Contains(out, "status=403") || !strings.Contains(out, reason) {
			t.Errorf("%s: want 403 %s, got %s", host, reason, out)
		}
	}
	// No way around the proxy: 127.0.0.2 inside is the sandbox's own
	// loopback, and there is no other interface.
	out, code := run(t, g, th, "curl -sS -m 5 --noproxy '*' http://127.0.0.2:"+strconv.Itoa(w.port)+"/; ip -o addr 2>/dev/null || cat /proc/net/dev")
	if code == 0 && strings.Contains(out, originBody) {
		t.Fatalf("reached the origin without the proxy: %s", out)
	}
	if w.hits.Load() != served {
		t.Fatalf("the origin saw %d requests after the denied ones, want %d", w.hits.Load(), served)
	}
	assertEgressDenials(t, g, 4) // three names, one plain-HTTP tunnel
}

// assertEgressDenials checks the gateway's log names a denied host with its
// sandbox, and the deny counter reached want.
func assertEgressDenials(t *testing.T, g *gateway, want float64) {
	t.Helper()
	logs := g.logs.String()
	found := false
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"other.internal"`) && strings.Contains(line, "not_allowed") && strings.Contains(line, `"sandbox_id"`) {
			found = true
		}
	}
	if !found {
		t.Errorf("no log line for the denied other.internal:\n%s", tail(logs, 40))
	}
	_, body, _ := call(t, "GET", g.URL+"/metrics", nil)
	var denied float64
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, `sandgate_egress_requests_total{decision="deny"`) {
			var v float64
			_, _ = fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			denied += v
		}
	}
	if denied < want {
		t.Errorf("sandgate_egress_requests_total deny = %v, want >= %v", denied, want)
	}
}

// TestEgressOverrideByAdmin: the fleet lets nothing out (egress none); an
// admin's provisioner create opens the allow-listed origin for one
// sandbox, recreating it under the new policy; a user's own create cannot.
func TestEgressOverrideByAdmin(t *testing.T) {
	t.Parallel()
	w := newEgressWorld(t)
	f := newFleet(t, append(w.flags("none"), "--auth-api-keys", "ops="+sha("ops-key")+":threads+admin,alice="+sha("alice-key"))...)
	g := f.start()
	alice := []string{"Authorization", "Bearer alice-key"}
	exec := func(thread string) string {
		code, body, _ := call(t, "POST", g.URL+"/threads/"+thread+"/v1/shell/exec",
			map[string]any{"command": "curl -sS -m 20 " + w.url("example.internal")}, alice...)
		if code != 200 {
			t.Fatalf("exec: %d %s", code, body)
		}
		return string(body)
	}
	if out := exec("t1"); strings.Contains(out, originBody) {
		t.Fatalf("egress none let the origin through: %s", out)
	}
	policy := map[string]any{"mode": "proxy", "allow": []string{"example.internal"}}
	create := map[string]any{"sandbox_id": "t1", "thread_id": "t1", "user_id": "alice", "egress": policy}
	if code, body, _ := call(t, "POST", g.URL+"/api/sandboxes", create, alice...); code != 403 {
		t.Fatalf("a user set their own egress: %d %s", code, body)
	}
	bad := map[string]any{"sandbox_id": "t1", "thread_id": "t1", "user_id": "alice", "egress": map[string]any{"mode": "wide-open"}}
	if code, body, _ := call(t, "POST", g.URL+"/api/sandboxes", bad, "Authorization", "Bearer ops-key"); code != 400 {
		t.Fatalf("bad egress mode: %d %s", code, body)
	}
	if code, body, _ := call(t, "POST", g.URL+"/api/sandboxes", create, "Authorization", "Bearer ops-key"); code != 200 {
		t.Fatalf("admin create with egress: %d %s", code, body)
	}
	if out := exec("t1"); !strings.Contains(out, originBody) {
		t.Fatalf("after the admin's override the origin is still unreachable: %s", out)
	}
	if out := exec("t2"); strings.Contains(out, originBody) {
		t.Fatalf("another sandbox got the override: %s", out)
	}
}
