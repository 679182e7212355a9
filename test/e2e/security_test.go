package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/testutil"
)

const (
	jwtSecret   = "e2e-secret-0123456789abcdef0123456789abcdef"
	jwtAudience = "sandgate-e2e"
	hostSuffix  = "sbx.test"
)

func sha(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// securedFleet is one gateway with API keys, HS256 JWTs and host routing.
func securedFleet(t *testing.T, extra ...string) *gateway {
	return newSecuredFleet(t, extra...).start()
}

// newSecuredFleet is securedFleet's fleet, not started.
func newSecuredFleet(t *testing.T, extra ...string) *fleet {
	keys := strings.Join([]string{
		"alice=" + sha("alice-key"),
		"bob=" + sha("bob-key") + ":threads",
		"ops=" + sha("ops-key") + ":admin",
		"scraper=" + sha("scraper-key") + ":",
	}, ",")
	f := newFleet(t, append([]string{"--auth-api-keys", keys, "--auth-jwt-hs256-secret", jwtSecret,
		"--auth-jwt-audience", jwtAudience, "--host-suffix", hostSuffix}, extra...)...)
	return f
}

// token signs claims with the e2e secret; an absent aud is jwtAudience,
// a nil one is left out.
func token(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	if aud, ok := claims["aud"]; !ok {
		claims["aud"] = jwtAudience
	} else if aud == nil {
		delete(claims, "aud")
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// req sends one request; host, when set, replaces the Host header.
type req struct {
	method, path, host string
	body               any
	hdr                []string
}

func (r req) do(t *testing.T, g *gateway) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	if r.body != nil {
		b, _ := json.Marshal(r.body)
		rd = bytes.NewReader(b)
	}
	hr, err := http.NewRequest(r.method, g.URL+r.path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if r.body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if r.host != "" {
		hr.Host = r.host
	}
	for i := 0; i+1 < len(r.hdr); i += 2 {
		hr.Header.Set(r.hdr[i], r.hdr[i+1])
	}
	resp, err := g.client.Do(hr)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func bearer(cred string) []string {
	if cred == "" {
		return nil
	}
	return []string{"Authorization", "Bearer " + cred}
}

// TestIsolationMatrix: every credential against every route to each owner's
// sandbox. A sandbox's marker file names its owner, so a 200 proves which
// sandbox answered, not just that something did.
func TestIsolationMatrix(t *testing.T) {
	t.Parallel()
	g := securedFleet(t)
	owners := map[string]string{"alice": "alice-key", "bob": "bob-key"}
	sids := map[string]string{}
	for user, key := range owners {
		// The same thread name for both users: two sandboxes.
		code, body, _ := req{"POST", "/threads/shared/v1/file/write", "",
			map[string]any{"file": "/mnt/user-data/workspace/owner.txt", "content": user}, bearer(key)}.do(t, g)
		if code != 200 {
			t.Fatalf("%s writes its marker: %d %s", user, code, body)
		}
		sids[user] = identity.SandboxID(user, "shared")
	}
	if sids["alice"] == sids["bob"] {
		t.Fatal("two users' threads share a sandbox id")
	}
	carol := token(t, jwt.MapClaims{"sub": "carol", "exp": time.Now().Add(time.Hour).Unix(), "threads": []string{"proj-*"}})
	expired := token(t, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Hour).Unix()})
	forged, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice"}).SignedString([]byte("not-the-secret-0123456789abcdef0123456789"))

	creds := []struct {
		name, cred string
		// want is the status reaching owner's sandbox by id; "" owner = any.
		want func(owner string) int
	}{
		{"alice", "alice-key", func(o string) int { return ownerOnly(o == "alice") }},
		{"bob", "bob-key", func(o string) int { return ownerOnly(o == "bob") }},
		{"admin", "ops-key", func(string) int { return 200 }},
		{"carol-jwt", carol, func(string) int { return 404 }},
		{"no-scope-key", "scraper-key", func(string) int { return 403 }},
		{"none", "", func(string) int { return 401 }},
		{"wrong-key", "mallory-key", func(string) int { return 401 }},
		{"expired-jwt", expired, func(string) int { return 401 }},
		{"forged-jwt", forged, func(string) int { return 401 }},
	}
	read := map[string]any{"file": "/mnt/user-data/workspace/owner.txt"}
	for _, c := range creds {
		for owner, sid := range sids {
			routes := []req{
				{"POST", "/sandboxes/" + sid + "/v1/file/read", "", read, bearer(c.cred)},
				{"POST", "/v1/file/read", sid + "." + hostSuffix, read, bearer(c.cred)},
				{"GET", "/api/sandboxes/" + sid, "", nil, bearer(c.cred)},
				{"GET", "/api/sandboxes/" + sid, "", nil, []string{"X-API-Key", c.cred}},
			}
			for _, r := range routes {
				name := fmt.Sprintf("%s->%s %s %s%s", c.name, owner, r.method, r.host, r.path)
				if r.hdr != nil && r.hdr[0] == "X-API-Key" {
					if c.cred == "" || strings.Contains(c.name, "jwt") {
						continue // X-API-Key carries API keys, as DeerFlow sends them
					}
					name += " (X-API-Key)"
				}
				code, body, _ := r.do(t, g)
				if want := c.want(owner); code != want {
					t.Errorf("%s: %d, want %d: %s", name, code, want, body)
					continue
				}
				if code == 200 && strings.HasSuffix(r.path, "/file/read") && !strings.Contains(string(body), `"content":"`+owner+`"`) {
					t.Errorf("%s: answered by the wrong sandbox: %s", name, body)
				}
				if code >= 400 {
					jsonError(t, r.path, body)
				}
			}
		}
	}

	// Destroying another user's sandbox is refused and leaves it running; the
	// answer is the one an unknown id gets (delete is best effort), so it
	// does not tell alice that bob's sandbox exists.
	if code, _, _ := (req{"DELETE", "/api/sandboxes/" + sids["bob"], "", nil, []string{"X-API-Key", "alice-key"}}).do(t, g); code != 200 {
		t.Errorf("alice deletes bob's sandbox: %d, want 200 (as for an unknown id)", code)
	}
	if code, body, _ := (req{"POST", "/threads/shared/v1/file/read", "", read, bearer("bob-key")}).do(t, g); code != 200 || !strings.Contains(string(body), `"content":"bob"`) {
		t.Fatalf("bob's sandbox after alice's deletes: %d %s", code, body)
	}

	// Listing: a user sees their own; admin sees all. The list holds what
	// the provisioner API made, so each user registers the thread there.
	for user, key := range owners {
		if code, body, _ := (req{"POST", "/api/sandboxes", "", map[string]any{"sandbox_id": sids[user], "thread_id": "shared"},
			[]string{"X-API-Key", key}}).do(t, g); code != 200 {
			t.Fatalf("%s registers its sandbox: %d %s", user, code, body)
		}
	}
	for cred, want := range map[string][]string{"alice-key": {sids["alice"]}, "ops-key": {sids["alice"], sids["bob"]}} {
		code, body, _ := req{"GET", "/api/sandboxes", "", nil, []string{"X-API-Key", cred}}.do(t, g)
		if code != 200 {
			t.Fatalf("list as %s: %d %s", cred, code, body)
		}
		for _, sid := range []string{sids["alice"], sids["bob"]} {
			listed, wanted := strings.Contains(string(body), sid), slices.Contains(want, sid)
			if listed != wanted {
				t.Errorf("list as %s: %s listed=%v, want %v", cred, sid, listed, wanted)
			}
		}
	}

	// A JWT's threads claim: its own pattern opens, anything else is 403.
	if code, body, _ := (req{"GET", "/threads/proj-1/v1/sandbox", "", nil, bearer(carol)}).do(t, g); code != 200 {
		t.Errorf("carol opens proj-1: %d %s", code, body)
	}
	if code, _, _ := (req{"GET", "/threads/other/v1/sandbox", "", nil, bearer(carol)}).do(t, g); code != 403 {
		t.Errorf("carol opens a thread outside her claim: %d, want 403", code)
	}

	// /metrics: any valid credential, even one with no scope.
	if code, _, _ := (req{"GET", "/metrics", "", nil, nil}).do(t, g); code != 401 {
		t.Errorf("anonymous /metrics: %d, want 401", code)
	}
	if code, _, _ := (req{"GET", "/metrics", "", nil, bearer("scraper-key")}).do(t, g); code != 200 {
		t.Errorf("scraper /metrics: %d, want 200", code)
	}
	// Probes stay open for load balancers.
	if code, _, _ := (req{"GET", "/readyz", "", nil, nil}).do(t, g); code != 200 {
		t.Errorf("/readyz: %d", code)
	}
}

// jsonError checks body is a JSON error, never a bare page: the gateway's
// shape, or on the provisioner API DeerFlow's {"detail": ...}.
func jsonError(t *testing.T, path string, body []byte) {
	t.Helper()
	if !strings.HasPrefix(path, "/api/") {
		errorCode(t, body)
		return
	}
	var e struct{ Detail string }
	if json.Unmarshal(body, &e) != nil || e.Detail == "" {
		t.Errorf("%s: not a DeerFlow error: %s", path, body)
	}
}

func ownerOnly(owner bool) int {
	if owner {
		return 200
	}
	return 404 // not 403: whether the id exists is not disclosed
}

// TestNoCredentialReachesTheSandbox: the sandbox runs untrusted code, so
// the client's credential (which opens other sandboxes of its user) must not
// reach it; the sandbox's own secret must (not the shared sandbox_api_key,
// which this sandbox does not need), and must not come back. The sandbox
// here is the real server, isolated (the default, and the only mode with
// credentials), behind a recorder (testdata/recordsandbox) that writes down
// every header it receives and answers with the sandbox key it was sent, as
// a leaking sandbox would.
func TestNoCredentialReachesTheSandbox(t *testing.T) {
	t.Parallel()
	f := newSecuredFleet(t, "--sandbox-api-key", "inner-secret", "--process-binary", recordingSandbox(t))
	g := f.start()
	// The client authenticates with its bearer token and also sends its key
	// as X-API-Key, and tries to choose the sandbox key itself.
	hdr := append(bearer("alice-key"), "X-API-Key", "alice-key", "X-Aio-Api-Key", "client-forged")
	var answers []http.Header
	for _, path := range []string{"/threads/x/v1/shell/exec", "/sandboxes/" + identity.SandboxID("alice", "x") + "/v1/shell/exec"} {
		code, body, h := req{"POST", path, "", map[string]any{"command": "env"}, hdr}.do(t, g)
		if code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		for _, secret := range []string{"alice-key", "inner-secret", "client-forged"} {
			if strings.Contains(string(body), secret) {
				t.Errorf("%s: %q reached the sandbox's environment", path, secret)
			}
		}
		answers = append(answers, h)
	}
	seen, keys := 0, map[string]bool{"inner-secret": true}
	for _, r := range receivedHeaders(t, filepath.Join(f.dataDir, "sandboxes", "process")) {
		for k, v := range r.Header {
			for _, secret := range []string{"alice-key", "client-forged"} {
				if strings.Contains(strings.Join(v, " "), secret) {
					t.Errorf("the sandbox received %q in header %s of %s", secret, k, r.Path)
				}
			}
		}
		if r.Path != "/v1/shell/exec" {
			continue // the backend's own readiness probes
		}
		seen++
		if got := r.Header.Values("Authorization"); len(got) != 0 {
			t.Errorf("the sandbox received Authorization %q", got)
		}
		if got := r.Header.Values("X-Api-Key"); len(got) != 0 {
			t.Errorf("the sandbox received X-API-Key %q", got)
		}
		got := r.Header.Values("X-Aio-Api-Key")
		if len(got) != 1 || len(got[0]) != 43 || got[0] == "inner-secret" {
			t.Errorf("the sandbox received X-Aio-Api-Key %q, want its own minted secret alone", got)
		}
		for _, k := range got {
			keys[k] = true
		}
	}
	if seen != 2 {
		t.Fatalf("the recorder saw %d execs, want 2", seen)
	}
	for _, h := range answers {
		for k, v := range h {
			for key := range keys {
				if strings.Contains(strings.Join(v, " "), key) {
					t.Errorf("a sandbox key came back to the client in header %s", k)
				}
			}
		}
	}
	if strings.Contains(g.logs.String(), "alice-key") || strings.Contains(g.logs.String(), "inner-secret") {
		t.Error("a credential was logged")
	}
}

// recordingSandbox builds testdata/recordsandbox into a directory of its own
// and returns it.
func recordingSandbox(t *testing.T) string { return buildTestdata(t, "recordsandbox") }

// buildTestdata builds the static program testdata/name into a directory of
// its own and returns its path.
func buildTestdata(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", bin, "./test/e2e/testdata/"+name)
	cmd.Dir = testutil.ModuleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build testdata/%s: %v\n%s", name, err, out)
	}
	return bin
}

// recordPrefix starts the lines testdata/recordsandbox records.
const recordPrefix = "recordsandbox: "

type receivedRequest struct {
	Path   string
	Header http.Header
}

// receivedHeaders reads what the recording sandboxes received from their
// logs in the process backend's state dir.
func receivedHeaders(t *testing.T, stateDir string) []receivedRequest {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(stateDir, "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no sandbox log in %s: %v", stateDir, err)
	}
	var out []receivedRequest
	for _, log := range logs {
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, recorded(t, string(b))...)
	}
	if len(out) == 0 {
		t.Fatal("the recording sandbox recorded nothing")
	}
	return out
}

// recorded parses the recorder's lines of one sandbox log.
func recorded(t *testing.T, log string) []receivedRequest {
	t.Helper()
	var out []receivedRequest
	for _, line := range strings.Split(log, "\n") {
		line, ok := strings.CutPrefix(line, recordPrefix)
		if !ok {
			continue
		}
		var r receivedRequest
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("recorded line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// TestPerUserLimits against real gateways: the create rate is fleet-wide
// (one create on each of two replicas spends the budget of both; 429 +
// Retry-After, other users unaffected) and the body size (413, sandbox
// unharmed).
func TestPerUserLimits(t *testing.T) {
	t.Parallel()
	f := newSecuredFleet(t, "--create-rate", "2/1h", "--max-body-bytes", "64k")
	g, g2 := f.start(), f.start()
	for i, replica := range []*gateway{g, g2} {
		if code, body, _ := (req{"GET", fmt.Sprintf("/threads/r%d/v1/sandbox", i), "", nil, bearer("alice-key")}).do(t, replica); code != 200 {
			t.Fatalf("create %d: %d %s", i, code, body)
		}
	}
	code, body, hdr := req{"GET", "/threads/r2/v1/sandbox", "", nil, bearer("alice-key")}.do(t, g)
	if code != 429 || hdr.Get("Retry-After") == "" || errorCode(t, body) != "rate_limited" {
		t.Fatalf("third create in the hour: %d %q %s", code, hdr.Get("Retry-After"), body)
	}
	// Existing sandboxes and other users go on.
	if code, _, _ := (req{"GET", "/threads/r0/v1/sandbox", "", nil, bearer("alice-key")}).do(t, g); code != 200 {
		t.Errorf("alice's existing sandbox after the limit: %d", code)
	}
	if code, _, _ := (req{"GET", "/threads/r0/v1/sandbox", "", nil, bearer("bob-key")}).do(t, g); code != 200 {
		t.Errorf("bob after alice hit the limit: %d", code)
	}

	big := strings.Repeat("x", 100<<10)
	code, body, _ = req{"POST", "/threads/r0/v1/file/write", "",
		map[string]any{"file": "/mnt/user-data/workspace/big.txt", "content": big}, bearer("alice-key")}.do(t, g)
	if code != 413 || errorCode(t, body) != "too_large" {
		t.Fatalf("100 KiB body over a 64 KiB limit: %d %s", code, body)
	}
	code, body, _ = req{"POST", "/threads/r0/v1/file/write", "",
		map[string]any{"file": "/mnt/user-data/workspace/small.txt", "content": "ok"}, bearer("alice-key")}.do(t, g)
	if code != 200 {
		t.Fatalf("a small write after the 413: %d %s", code, body)
	}
}

// TestSlowAndOversizedHeaders: a client that trickles its headers is cut
// off after read_header_timeout, and an oversized header block is 431,
// before any authentication or sandbox work.
func TestSlowAndOversizedHeaders(t *testing.T) {
	t.Parallel()
	g := securedFleet(t, "--read-header-timeout", "1s", "--max-header-bytes", "8192")
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /threads/a/v1/sandbox HTTP/1.1\r\nHost: x\r\n") // never finished
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(30 * time.Second))
	_, err = io.ReadAll(conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a connection with unfinished headers is still open after 30s")
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("closed after %s, before read_header_timeout", took)
	}

	code, _, _ := req{"GET", "/threads/a/v1/sandbox", "", nil, []string{"X-Padding", strings.Repeat("p", 16<<10)}}.do(t, g)
	if code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("16 KiB header over an 8 KiB limit: %d, want 431", code)
	}
}
