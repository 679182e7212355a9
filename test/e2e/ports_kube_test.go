package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/identity"
)

// TestKubernetesPorts: on the kubernetes backend (a real node, Sandgate's
// server in the Pod, reached by Pod IP), a server a command starts inside
// the Pod on 127.0.0.1:3000, which nothing outside the Pod's network
// namespace can reach, answers through the path route, the host route and
// a preview link (both forms, no other credential): the sandbox server in
// the Pod bridges it. A port with no listener is a 502 naming it within
// 1 s; a link for 3000 never opens 3001, by a path under it nor re-encoded
// with 3001 (its signature is 3000's); bob's credential never opens it.
func TestKubernetesPorts(t *testing.T) {
	t.Parallel()
	c := newKubeCluster(t)
	checkPortsAndLinks(t, newSecuredFleet(t, append(c.flags(t), "--preview-suffix", previewSuffix)...).start(), "127.0.0.1")
}

// checkPortsAndLinks is TestKubernetesPorts on g, its apps listening on
// bind in the sandbox.
func checkPortsAndLinks(t *testing.T, g *gateway, bind string) {
	const thread = "webapp"
	alice, bob := bearer("alice-key"), bearer("bob-key")
	sid := identity.SandboxID("alice", thread)
	marker := "served from the sandbox of alice " + randomHex(8)
	other := "the other port of the sandbox of alice " + randomHex(8)
	for port, text := range map[string]string{"3000": marker, "3001": other} {
		start := "mkdir -p site" + port + "/sub && printf '%s' '" + text + "' > site" + port + "/sub/page.txt && " +
			"busybox httpd -p " + bind + ":" + port + " -h \"$PWD/site" + port + "\" && echo started"
		if d := shell(t, g.URL, thread, start, alice...); d.ExitCode == nil || *d.ExitCode != 0 || !strings.Contains(d.Output, "started") {
			t.Fatalf("start the server on %s: %+v", port, d)
		}
	}

	link := createPreview(t, g, thread, "alice", 3000, "1h")
	tok := previewToken(t, link)
	for _, rt := range []req{
		{"GET", "/threads/" + thread + "/ports/3000/sub/page.txt?x=1", "", nil, alice},
		{"GET", "/sub/page.txt?x=1", "3000-" + sid + "." + hostSuffix, nil, alice},
		{"GET", "/sub/page.txt?x=1", tok + "." + previewSuffix, nil, nil},
		{"GET", "/preview/" + tok + "/sub/page.txt?x=1", "", nil, nil},
	} {
		var code int
		var body []byte
		eventually(5*time.Second, func() bool { // the daemon may still be binding
			code, body, _ = rt.do(t, g)
			return code == 200
		})
		if code != 200 || string(body) != marker {
			t.Errorf("%s (host %q): %d %q, want the app's %q", rt.path, rt.host, code, body, marker)
		}
	}

	// Nothing listens on 3002: a 502 naming it, at once, by route and by
	// link (the bridge's answer in the sandbox API's envelope, a directly
	// dialled port's in the gateway's).
	closed := createPreview(t, g, thread, "alice", 3002, "1h")
	for _, rt := range []req{
		{"GET", "/threads/" + thread + "/ports/3002/", "", nil, alice},
		{"GET", "/preview/" + previewToken(t, closed) + "/", "", nil, nil},
	} {
		began := time.Now()
		code, body, _ := rt.do(t, g)
		took := time.Since(began)
		var env envelope
		_ = json.Unmarshal(body, &env)
		if code != 502 || env.said() != "nothing listens on port 3002 in the sandbox" || took > time.Second {
			t.Errorf("%s: %d %s after %s, want 502 naming 3002 within 1s", rt.path, code, body, took)
		}
	}

	// The link for 3000 opens 3000 only.
	for _, path := range []string{"/ports/3001/sub/page.txt", "/../3001/sub/page.txt", "/%2e%2e/3001/sub/page.txt", "/v1/shell/exec"} {
		for _, hostForm := range []bool{true, false} {
			if code, body, _ := previewGet(t, g, link, hostForm, path); code == 200 || strings.Contains(body, other) {
				t.Errorf("link for 3000, %s (host form %v): %d %q", path, hostForm, code, body)
			}
		}
	}
	forged := swapPort(t, tok, 3001)
	for _, hostForm := range []bool{true, false} {
		code, body, _ := previewGet(t, g, api.Preview{PathURL: "http://x/preview/" + forged + "/"}, hostForm, "/sub/page.txt")
		if code != 404 || strings.Contains(body, other) || !strings.Contains(body, "preview_not_found") {
			t.Errorf("link for 3000 re-encoded for 3001 (host form %v): %d %q, want the JSON 404", hostForm, code, body)
		}
	}
	if code, body, _ := previewGet(t, g, createPreview(t, g, thread, "alice", 3001, "1h"), true, "/sub/page.txt"); code != 200 || body != other {
		t.Errorf("a link for 3001: %d %q, want %q", code, body, other)
	}

	// Bob: alice's Pod by host is as unknown as a missing sandbox.
	if code, body, _ := (req{"GET", "/sub/page.txt", "3000-" + sid + "." + hostSuffix, nil, bob}).do(t, g); code != 404 || strings.Contains(string(body), marker) {
		t.Errorf("bob by alice's host: %d %s, want 404", code, body)
	}
}

// swapPort re-encodes a link with another port, keeping its signature:
// what someone holding one link can make without the key.
func swapPort(t *testing.T, tok string, port int) string {
	t.Helper()
	raw, err := linkEncoding.DecodeString(tok)
	if err != nil || len(raw) < 12 {
		t.Fatalf("decode link: %v", err)
	}
	raw[10], raw[11] = byte(port>>8), byte(port)
	return linkEncoding.EncodeToString(raw)
}
