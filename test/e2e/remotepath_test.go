package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestRemoteBackendDotSegmentsNeverLeave: an outer gateway (remote
// backend, the provisioner's admin key) in front of a real path-normalising
// nginx (`proxy_pass http://up/;`) in front of an inner Sandgate. Alice's
// /threads/x/v1/../../sandboxes/{bob's id}/v1/... in every encoding is
// refused by the outer gateway (400) and never reaches nginx; the same path
// sent to nginx directly with the admin key does reach bob, which is what
// the outer gateway would have done.
func TestRemoteBackendDotSegmentsNeverLeave(t *testing.T) {
	t.Parallel()
	og, nginxURL, accessLog := remoteBehindNginx(t)
	if code, body, _ := (req{"POST", "/threads/x/v1/shell/exec", "", map[string]any{"command": "echo hi"}, bearer("alice-key")}).do(t, og); code != 200 {
		t.Fatalf("alice's own sandbox: %d %s", code, body)
	}
	bob, alice := identity.SandboxID("bob", "t"), identity.SandboxID("alice", "x")
	read := []byte(`{"file": "/mnt/user-data/workspace/secret.txt"}`)

	// The hop the outer gateway must never make: nginx resolves the dot
	// segments below alice's sandbox URL into bob's sandbox. (Alice's
	// sandbox URL is {nginx}/sandboxes/{alice}, so three segments up from
	// its /v1/ is the root.)
	setup := "/sandboxes/" + alice + "/v1/../../../sandboxes/" + bob + "/v1/file/read"
	code, body := rawRequest(t, nginxURL, setup, read, "Bearer front-key")
	if code != 200 || !strings.Contains(body, "bob-private-marker") {
		t.Fatalf("setup: nginx does not resolve dot segments into bob's sandbox (%d %s); the attack below proves nothing", code, body)
	}

	for _, tail := range dotSegmentTails(bob) {
		path := "/threads/x/v1/" + tail
		code, body := rawRequest(t, og.URL, path, read, "Bearer alice-key")
		if strings.Contains(body, "bob-private-marker") {
			t.Errorf("%s: alice read bob's file through the remote backend: %d %s", path, code, body)
			continue
		}
		if code != 400 || !strings.Contains(body, `"bad_request"`) {
			t.Errorf("%s: %d %s, want a JSON 400 before anything is sent upstream", path, code, body)
		}
	}
	nothingLeftNginx(t, accessLog, setup)
}

// rawRequest POSTs body to base with path on the request line exactly as
// given (no client-side cleaning or re-encoding); authorization "" sends none.
func rawRequest(t *testing.T, base, path string, body []byte, authorization string) (int, string) {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.NewRequest("POST", base, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.URL = &url.URL{Scheme: u.Scheme, Host: u.Host, Opaque: path}
	r.Header.Set("Content-Type", "application/json")
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	resp, err := clientFor(base).Do(r)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startNormalisingNginx runs nginx on port in front of upstream with a
// proxy_pass that has a URI part, so nginx sends its normalised (decoded,
// dot segments resolved) path upstream. It returns its access log, one
// raw request line per request.
func startNormalisingNginx(t *testing.T, port int, upstream string) string {
	t.Helper()
	dir := t.TempDir()
	testutil.StartNginx(t, dir, fmt.Sprintf(`    log_format raw '$request';
    access_log %[1]s/access.log raw;
    upstream up { server %[2]s; }
    server {
        listen 127.0.0.1:%[3]d;
        location / { proxy_pass http://up/; }
    }`, dir, upstream, port))
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return filepath.Join(dir, "access.log")
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx in front of %s did not answer /healthz: %v", upstream, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// remoteBehindNginx starts an inner Sandgate (the provisioner, key
// front-key as admin) behind a path-normalising nginx and an outer gateway
// (remote backend, keys alice-key and bob-key) in front of that nginx, and
// has bob write a marker file in his thread t through the outer gateway.
// It returns the outer gateway, nginx's URL and its access log.
func remoteBehindNginx(t *testing.T) (og *gateway, nginxURL, accessLog string) {
	t.Helper()
	nginxPort := testutil.FreePort(t)
	nginxURL = fmt.Sprintf("http://127.0.0.1:%d", nginxPort)
	ig := newFleet(t, "--auth-api-keys", "front="+sha("front-key")+":admin", "--public-url", nginxURL).start()
	accessLog = startNormalisingNginx(t, nginxPort, strings.TrimPrefix(ig.URL, "http://"))
	og = newFleet(t, "--backend", "remote", "--provisioner-url", nginxURL, "--provisioner-api-key", "front-key",
		"--auth-api-keys", "alice="+sha("alice-key")+",bob="+sha("bob-key")).start()
	secret := map[string]any{"file": "/mnt/user-data/workspace/secret.txt", "content": "bob-private-marker"}
	if code, body, _ := (req{"POST", "/threads/t/v1/file/write", "", secret, bearer("bob-key")}).do(t, og); code != 200 {
		t.Fatalf("bob writes through the outer gateway: %d %s", code, body)
	}
	return og, nginxURL, accessLog
}
