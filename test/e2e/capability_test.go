package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/identity"
)

type provisioned struct {
	SandboxID string `json:"sandbox_id"`
	URL       string `json:"sandbox_url"`
	Status    string `json:"status"`
	User      string `json:"user_id"`
	Thread    string `json:"thread_id"`
}

// provision is DeerFlow's RemoteSandboxBackend create: POST /api/sandboxes
// with X-API-Key and its own 16-hex id (sha256(user:thread)[:16]).
func provision(t *testing.T, g *gateway, key, user, thread string) provisioned {
	t.Helper()
	code, body, _ := call(t, "POST", g.URL+"/api/sandboxes", map[string]any{
		"sandbox_id": identity.SandboxID(user, thread), "thread_id": thread, "user_id": user,
	}, "X-API-Key", key)
	var p provisioned
	if code != 200 || json.Unmarshal(body, &p) != nil || p.Status != "Running" {
		t.Fatalf("provision %s/%s: %d %s", user, thread, code, body)
	}
	return p
}

// aio is an unchanged AIO client: plain HTTP against base_url=sandbox_url,
// no credential of any kind.
type aio struct {
	t    *testing.T
	base string
}

func (a aio) do(method, path string, body any) (int, []byte) {
	a.t.Helper()
	code, b, _ := call(a.t, method, a.base+path, body)
	return code, b
}

func (a aio) ok(method, path string, body any) []byte {
	a.t.Helper()
	code, b := a.do(method, path, body)
	if code != 200 {
		a.t.Fatalf("AIO %s %s: %d %s", method, path, code, b)
	}
	return b
}

// TestCapabilityURLServesAnUnchangedAIOClient: with API keys on, the
// sandbox_url DeerFlow gets is enough for AioSandbox (exec, file write, read,
// list, download), reaches only that sandbox, is not derivable from the
// sandbox id, dies with the sandbox, and never reaches the gateway's logs.
func TestCapabilityURLServesAnUnchangedAIOClient(t *testing.T) {
	t.Parallel()
	g := securedFleet(t)
	alice := provision(t, g, "alice-key", "alice", "cap-1")
	bob := provision(t, g, "bob-key", "bob", "cap-1")
	capability, ok := strings.CutPrefix(alice.URL, g.URL+"/c/")
	if !ok || len(capability) != 43 || strings.Contains(capability, alice.SandboxID) || alice.URL == bob.URL {
		t.Fatalf("sandbox_url %q (bob's %q): want {gateway}/c/{43-char capability}, not derived from the id", alice.URL, bob.URL)
	}

	// The AIO client's calls, as DeerFlow's AioSandbox makes them.
	a := aio{t, alice.URL}
	a.ok("GET", "/v1/sandbox", nil) // wait_for_sandbox_ready
	const file, content = "/mnt/user-data/workspace/cap.txt", "written through a capability URL"
	a.ok("POST", "/v1/file/write", map[string]any{"file": file, "content": content})
	if b := a.ok("POST", "/v1/file/read", map[string]any{"file": file}); !strings.Contains(string(b), content) {
		t.Fatalf("read: %s", b)
	}
	if b := a.ok("POST", "/v1/shell/exec", map[string]any{"command": "cat " + file + " && echo && whoami >/dev/null"}); !strings.Contains(string(b), content) {
		t.Fatalf("exec: %s", b)
	}
	if b := a.ok("POST", "/v1/file/list", map[string]any{"path": "/mnt/user-data/workspace"}); !strings.Contains(string(b), "cap.txt") {
		t.Fatalf("list: %s", b)
	}
	if b := a.ok("GET", "/v1/file/download?path="+file, nil); string(b) != content {
		t.Fatalf("download: %q", b)
	}
	// A credential the client happens to send changes nothing (it is not
	// needed, and it is not passed on).
	if code, b, _ := call(t, "POST", alice.URL+"/v1/file/read", map[string]any{"file": file}, "Authorization", "Bearer nonsense"); code != 200 || !strings.Contains(string(b), content) {
		t.Fatalf("with a stray Authorization: %d %s", code, b)
	}
	// Reaches only its own sandbox: bob's capability sees bob's workspace.
	if code, b, _ := call(t, "POST", bob.URL+"/v1/file/read", map[string]any{"file": file}); code == 200 || strings.Contains(string(b), content) {
		t.Fatalf("bob's capability read alice's file: %d %s", code, b)
	}

	// Every hand-out of the same incarnation is the same URL.
	for _, h := range []struct{ path, cred string }{
		{"/api/sandboxes/" + alice.SandboxID, "X-API-Key"},
		{"/threads/cap-1/sandbox", "Authorization"},
	} {
		val := "alice-key"
		if h.cred == "Authorization" {
			val = "Bearer alice-key"
		}
		code, b, _ := call(t, "GET", g.URL+h.path, nil, h.cred, val)
		var v struct {
			URL string `json:"sandbox_url"`
		}
		if code != 200 || json.Unmarshal(b, &v) != nil || v.URL != alice.URL {
			t.Fatalf("GET %s: %d %s, want sandbox_url %s", h.path, code, b, alice.URL)
		}
	}
	if code, b, _ := call(t, "GET", g.URL+"/api/sandboxes", nil, "X-API-Key", "alice-key"); code != 200 || !strings.Contains(string(b), alice.URL) {
		t.Fatalf("list: %d %s", code, b)
	}

	// Guessed, truncated, malformed: one JSON 404, the same for each.
	var random [32]byte
	_, _ = rand.Read(random[:])
	flipped := []byte(capability)
	flipped[10] ^= 1
	notFound := ""
	for _, bad := range []string{
		"/c/" + base64.RawURLEncoding.EncodeToString(random[:]) + "/v1/sandbox",
		"/c/" + capability[:42] + "/v1/sandbox",
		"/c/" + capability + "A/v1/sandbox",
		"/c/" + string(flipped) + "/v1/sandbox",
		"/c/" + alice.SandboxID + "/v1/sandbox",
		"/c/" + capability[:20] + "!" + capability[21:] + "/v1/sandbox",
		"/c/" + capability + "/v2/sandbox",
		"/c/" + capability,
		"/c/",
	} {
		code, b, _ := call(t, "GET", g.URL+bad, nil)
		if code != 404 || errorCode(t, b) != "not_found" {
			t.Errorf("GET %s: %d %s, want a JSON 404", strings.Replace(bad, capability, "{capability}", 1), code, b)
		}
		if notFound == "" {
			notFound = string(b)
		} else if string(b) != notFound {
			t.Errorf("404 bodies differ: %s vs %s", b, notFound)
		}
	}

	// Destroyed: the URL answers 404 at once; the next incarnation has another.
	if code, b, _ := call(t, "DELETE", g.URL+"/api/sandboxes/"+alice.SandboxID, nil, "X-API-Key", "alice-key"); code != 200 {
		t.Fatalf("delete: %d %s", code, b)
	}
	if code, b := a.do("GET", "/v1/sandbox", nil); code != 404 || string(b) != notFound {
		t.Fatalf("capability of a destroyed sandbox: %d %s, want the 404 of an unknown one", code, b)
	}
	again := provision(t, g, "alice-key", "alice", "cap-1")
	if again.URL == alice.URL {
		t.Fatal("a new incarnation got the destroyed one's capability")
	}
	if code, _ := a.do("POST", "/v1/file/read", map[string]any{"file": file}); code != 404 {
		t.Fatalf("old capability opens the new incarnation: %d", code)
	}
	if b := (aio{t, again.URL}).ok("POST", "/v1/file/read", map[string]any{"file": file}); !strings.Contains(string(b), content) {
		t.Fatalf("new incarnation (same thread data): %s", b)
	}

	// Never logged: neither capability appears; the redacted form does.
	logs := g.logs.String()
	for _, c := range []string{capability, strings.TrimPrefix(again.URL, g.URL+"/c/")} {
		if strings.Contains(logs, c) || strings.Contains(logs, c[:20]) {
			t.Errorf("a capability is in the gateway's logs:\n%s", tail(logs, 40))
		}
	}
	if !strings.Contains(logs, `"path":"/c/{capability}/v1/file/read"`) || !strings.Contains(logs, `"route":"capability"`) {
		t.Errorf("no redacted access log line for capability requests:\n%s", tail(logs, 40))
	}
}

// TestCapabilityRevokedAcrossReplicas: a replica that cached a capability's
// route answers 404 once another replica destroyed the sandbox (its dial
// fails, the re-lookup finds nothing), and never provisions a new one.
func TestCapabilityRevokedAcrossReplicas(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "alice="+sha("alice-key"))
	a, b := f.start(), f.start()
	sb := provision(t, a, "alice-key", "alice", "cap-x")
	onB := strings.Replace(sb.URL, a.URL, b.URL, 1)
	for range 2 { // the second is served from b's cache
		if code, body, _ := call(t, "GET", onB+"/v1/sandbox", nil); code != 200 {
			t.Fatalf("capability on replica b: %d %s", code, body)
		}
	}
	if code, body, _ := call(t, "DELETE", a.URL+"/api/sandboxes/"+sb.SandboxID, nil, "X-API-Key", "alice-key"); code != 200 {
		t.Fatalf("delete on replica a: %d %s", code, body)
	}
	if code, body, _ := call(t, "POST", onB+"/v1/shell/exec", map[string]any{"command": "echo still-here"}); code != 404 {
		t.Fatalf("replica b after the destroy on a: %d %s, want 404", code, body)
	}
	if n := len(f.sandboxes()); n != 0 {
		t.Fatalf("%d sandboxes after the destroy: a capability provisioned one", n)
	}
}

// TestInnerCapabilityStaysOutOfTheFrontGatewaysLogs: a gateway whose remote
// backend is another Sandgate gets capability URLs as its sandbox URLs; it
// proxies through them without writing them to its log (nor does the inner
// gateway).
func TestInnerCapabilityStaysOutOfTheFrontGatewaysLogs(t *testing.T) {
	t.Parallel()
	inner := newFleet(t, "--auth-api-keys", "front="+sha("k")+":threads+admin")
	ig := inner.start()
	og := newFleet(t, "--backend", "remote", "--provisioner-url", ig.URL, "--provisioner-api-key", "k").start()
	if d := shell(t, og.URL, "chained-cap", "echo via-capability"); strings.TrimSpace(d.Output) != "via-capability" {
		t.Fatalf("exec through the front gateway: %+v", d)
	}
	code, body, _ := call(t, "GET", ig.URL+"/api/sandboxes", nil, "X-API-Key", "k")
	var list struct {
		Sandboxes []provisioned `json:"sandboxes"`
	}
	if code != 200 || json.Unmarshal(body, &list) != nil || len(list.Sandboxes) != 1 {
		t.Fatalf("inner list: %d %s", code, body)
	}
	capability := strings.TrimPrefix(list.Sandboxes[0].URL, ig.URL+"/c/")
	if len(capability) != 43 {
		t.Fatalf("inner sandbox_url %q is no capability URL", list.Sandboxes[0].URL)
	}
	for name, g := range map[string]*gateway{"front": og, "inner": ig} {
		if logs := g.logs.String(); strings.Contains(logs, capability[:20]) {
			t.Errorf("the capability is in the %s gateway's logs:\n%s", name, tail(logs, 30))
		}
	}
}

// TestCapabilityStaysOutOfTraces: the spans of a capability request (the
// gateway's server span, its acquire and proxy spans, the sandbox's) name the
// route and the redacted path, never the capability.
func TestCapabilityStaysOutOfTraces(t *testing.T) {
	t.Parallel()
	rcv := newOTLPReceiver(t)
	// The plain child: an isolated sandbox server has no network to
	// export its own spans on, and the sandbox's spans are checked too.
	f := newFleet(t, "--process-isolation", "none")
	f.env = tracingEnv(rcv)
	g := f.start()
	code, body, _ := call(t, "PUT", g.URL+"/threads/traced-cap/sandbox", nil)
	var v struct {
		URL string `json:"sandbox_url"`
	}
	if code != 200 || json.Unmarshal(body, &v) != nil || !strings.HasPrefix(v.URL, g.URL+"/c/") {
		t.Fatalf("PUT sandbox: %d %s", code, body)
	}
	capability := strings.TrimPrefix(v.URL, g.URL+"/c/")
	const traceID = "5bf92f3577b34da6a3ce929d0e0e4737"
	for _, parent := range []string{"00f067aa0ba902b8", "00f067aa0ba902b9"} { // a cache miss, then a hit
		code, body, _ = call(t, "POST", v.URL+"/v1/shell/exec", map[string]any{"command": "echo traced"},
			"Traceparent", "00-"+traceID+"-"+parent+"-01")
		if code != 200 {
			t.Fatalf("exec through the capability: %d %s", code, body)
		}
	}
	const route = "POST " + "/c/{capability}/v1/*"
	spans := rcv.trace(t, traceID, func(s []otlpSpan) bool {
		return len(named(s, gwService, route)) == 2 && len(named(s, sandboxService, sandboxExec)) == 2
	})
	for _, s := range spans {
		for k, val := range s.attrs {
			if strings.Contains(val, capability[:20]) {
				t.Errorf("span %s/%q attribute %s holds the capability", s.service, s.name, k)
			}
		}
	}
	for _, s := range named(spans, gwService, route) {
		if s.attrs["http.target"] != "/c/{capability}/v1/shell/exec" && s.attrs["url.path"] != "/c/{capability}/v1/shell/exec" {
			t.Errorf("server span path attributes %v, want the redacted path", s.attrs)
		}
	}
}

// TestCapabilityRequestsCountAgainstTheOwner: a capability acts for its
// sandbox's owner, so its requests share the owner's in-flight limit.
func TestCapabilityRequestsCountAgainstTheOwner(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "alice="+sha("alice-key"), "--max-requests-per-user", "1")
	g := f.start()
	sb := provision(t, g, "alice-key", "alice", "busy")
	workspace := filepath.Join(f.dataDir, "users", "alice", "threads", "busy", "user-data", "workspace")
	done := make(chan error, 1)
	go func() { // no t.Fatal here: the outcome goes back on done
		body := strings.NewReader(`{"command": "touch started; while [ ! -f go ]; do sleep 0.02; done; echo released"}`)
		resp, err := clientFor(sb.URL).Post(sb.URL+"/v1/shell/exec", "application/json", body)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), "released") {
			done <- fmt.Errorf("the held request: %d %s", resp.StatusCode, b)
			return
		}
		done <- nil
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(workspace, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held request never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, body, _ := call(t, "GET", sb.URL+"/v1/sandbox", nil)
	if code != 429 || errorCode(t, body) != "rate_limited" {
		t.Errorf("a second capability request while the owner's one is in flight: %d %s, want 429", code, body)
	}
	if code, _, _ := call(t, "GET", g.URL+"/threads/busy/v1/sandbox", nil, "Authorization", "Bearer alice-key"); code != 429 {
		t.Errorf("the owner's own request while a capability request is in flight: %d, want 429", code)
	}
	if err := os.WriteFile(filepath.Join(workspace, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the held request did not finish")
	}
	if code, body, _ := call(t, "GET", sb.URL+"/v1/sandbox", nil); code != 200 {
		t.Fatalf("after the held request: %d %s", code, body)
	}
}
