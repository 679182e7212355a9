package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDNSRebindingRefused attacks the default no-auth gateway as a web page
// whose name was rebound to 127.0.0.1 would: same-origin headers (Origin is
// the page's own origin, Sec-Fetch-Site same-origin), Host: evil.example.
// The request must be refused before any work: no sandbox, no command.
func TestDNSRebindingRefused(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	port := strings.TrimPrefix(g.URL, "http://127.0.0.1:")
	workspace := filepath.Join(f.dataDir, "users", "default", "threads", "rebind", "user-data", "workspace")
	exec := map[string]any{"command": "touch pwned"}

	for _, host := range []string{"evil.example", "evil.example:" + port, "localhost.evil.example:" + port, "127.0.0.1.evil.example"} {
		code, body, hdr := req{"POST", "/threads/rebind/v1/shell/exec", host, exec,
			[]string{"Origin", "http://" + host, "Sec-Fetch-Site", "same-origin"}}.do(t, g)
		if code != 421 || errorCode(t, body) != "misdirected_host" || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
			t.Errorf("Host %s: %d %s, want a JSON 421 misdirected_host", host, code, body)
		}
		for _, path := range []string{"/threads/rebind/sandbox", "/api/sandboxes", "/metrics"} {
			if code, body, _ := (req{"GET", path, host, nil, nil}).do(t, g); code != 421 {
				t.Errorf("Host %s GET %s: %d %s, want 421", host, path, code, body)
			}
		}
	}
	if n := len(f.sandboxes()); n != 0 {
		t.Fatalf("a refused request created %d sandboxes", n)
	}
	if _, err := os.Stat(filepath.Join(workspace, "pwned")); err == nil {
		t.Fatal("the rebound page's command ran")
	}
	// Probes are served under any name: a kubelet or balancer uses an IP.
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body, _ := (req{"GET", path, "10.1.2.3:" + port, nil, nil}).do(t, g); code != 200 {
			t.Errorf("probe %s by IP: %d %s", path, code, body)
		}
	}
	// The loopback names are served, on any port.
	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "[::1]:" + port, "localhost"} {
		code, body, _ := req{"POST", "/threads/rebind/v1/shell/exec", host, map[string]any{"command": "echo ok"}, nil}.do(t, g)
		if code != 200 || !strings.Contains(string(body), "ok") {
			t.Errorf("Host %s: %d %s, want 200", host, code, body)
		}
	}
}

// TestHostCheckSettings: public_url's host and allowed_hosts are served
// without auth; with auth configured any Host is (a rebound page has no
// credential to send, so it gets 401, not a sandbox).
func TestHostCheckSettings(t *testing.T) {
	t.Parallel()
	g := newFleet(t, "--public-url", "http://sandgate.test:9999", "--allowed-hosts", "gateway.internal,10.9.8.7").start()
	for host, want := range map[string]int{
		"sandgate.test": 404, "sandgate.test:1234": 404, "gateway.internal:80": 404, "10.9.8.7": 404,
		"gateway.internal.evil.example": 421, "10.9.8.6": 421,
	} {
		if code, body, _ := (req{"GET", "/threads/none/sandbox", host, nil, nil}).do(t, g); code != want {
			t.Errorf("Host %s: %d %s, want %d", host, code, body, want)
		}
	}
	authed := newFleet(t, "--auth-api-keys", "alice="+sha("alice-key")).start()
	if code, body, _ := (req{"GET", "/threads/none/sandbox", "evil.example", nil, nil}).do(t, authed); code != 401 {
		t.Errorf("auth on, no credential, Host evil.example: %d %s, want 401", code, body)
	}
	if code, body, _ := (req{"GET", "/threads/none/sandbox", "gateway.example", nil, bearer("alice-key")}).do(t, authed); code != 404 {
		t.Errorf("auth on, a credential, any Host: %d %s, want 404 (no sandbox yet)", code, body)
	}
}
