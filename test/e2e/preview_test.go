package e2e

import (
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/identity"
)

const (
	previewSuffix = "preview.test"
	sandboxOrigin = "sandbox-origin.test"
)

// TestPreviewLinks: a server alice starts inside her sandbox on
// 127.0.0.1:3000 answers through a preview link with no other credential,
// host form and path form, on any replica, on the process backend
// (isolated) and the docker backend (network none). SSE streams and a
// WebSocket echoes through a link; a link opens its port only; a revoked
// link and an expired one (ttl 1s) are 404 on the other replica within a
// second; a recreated sandbox kills its old links; alice's link never
// opens bob's sandbox, even re-encoded with bob's id; no log line holds a
// link; with sandbox_origin the path form is served there and only there.
func TestPreviewLinks(t *testing.T) {
	t.Parallel()
	wsecho := buildTestdata(t, "wsecho")
	t.Run("process", func(t *testing.T) {
		t.Parallel()
		checkPreviews(t, newSecuredFleet(t, "--preview-suffix", previewSuffix), wsecho)
	})
	t.Run("docker", func(t *testing.T) {
		t.Parallel()
		checkPreviews(t, newSecuredFleet(t, append(newDockerEnv(t).args(), "--preview-suffix", previewSuffix)...), wsecho)
	})
}

// createPreview is POST /threads/{thread}/previews on g as cred.
func createPreview(t *testing.T, g *gateway, thread, cred string, port int, ttl string) api.Preview {
	t.Helper()
	code, body, _ := call(t, "POST", g.URL+"/threads/"+thread+"/previews", map[string]any{"port": port, "ttl": ttl}, bearer(cred+"-key")...)
	var p api.Preview
	if code != 201 || json.Unmarshal(body, &p) != nil || p.ID == "" {
		t.Fatalf("create preview: %d %s", code, body)
	}
	return p
}

// previewGet fetches path through link p on g with no credential: the
// host form (Host: {link}.{preview_suffix}) or the path form.
func previewGet(t *testing.T, g *gateway, p api.Preview, hostForm bool, path string) (int, string, http.Header) {
	t.Helper()
	link := previewToken(t, p)
	r := req{"GET", "/preview/" + link + path, "", nil, nil}
	if hostForm {
		r = req{"GET", path, link + "." + previewSuffix, nil, nil}
	}
	code, body, hdr := r.do(t, g)
	return code, string(body), hdr
}

// previewToken is the link inside p's URLs.
func previewToken(t *testing.T, p api.Preview) string {
	t.Helper()
	i := strings.Index(p.PathURL, "/preview/")
	if i < 0 || !strings.HasSuffix(p.PathURL, "/") {
		t.Fatalf("path_url %q", p.PathURL)
	}
	return strings.TrimSuffix(p.PathURL[i+len("/preview/"):], "/")
}

// eventually polls f until it is true or within passes.
func eventually(within time.Duration, f func() bool) bool {
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		if f() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func checkPreviews(t *testing.T, f *fleet, wsecho string) {
	a, b := f.start(), f.start()
	c := f.start("--sandbox-origin", "http://"+sandboxOrigin)
	const thread = "webapp"
	marker := "the app of alice " + randomHex(8)
	other := "the other port of alice " + randomHex(8)
	bobs := "the app of bob " + randomHex(8)
	serve := func(g *gateway, user, thread, text string, port string) {
		t.Helper()
		dir := "site" // where checkPortSSE puts its CGI script
		if port != "3000" {
			dir += port
		}
		start := "mkdir -p " + dir + "/sub && printf '%s' '" + text + "' > " + dir + "/sub/page.txt && " +
			"busybox httpd -p 127.0.0.1:" + port + " -h \"$PWD/" + dir + "\" && echo started"
		if d := shell(t, g.URL, thread, start, bearer(user+"-key")...); d.ExitCode == nil || *d.ExitCode != 0 {
			t.Fatalf("start the server on %s: %+v", port, d)
		}
	}
	serve(a, "alice", thread, marker, "3000")
	serve(a, "alice", thread, other, "3001")
	serve(a, "bob", thread, bobs, "3000")

	link := createPreview(t, a, thread, "alice", 3000, "1h")
	if !strings.HasPrefix(link.URL, "http://"+previewToken(t, link)+"."+previewSuffix+":") || link.Port != 3000 ||
		time.Until(link.ExpiresAt) < 59*time.Minute || time.Until(link.ExpiresAt) > 61*time.Minute {
		t.Errorf("link %+v: want the host form on the gateway's port, port 3000, expiring in 1h", link)
	}
	// Both forms, on the replica that made it and on another, no credential.
	for _, g := range []*gateway{a, b} {
		for _, hostForm := range []bool{true, false} {
			var code int
			var body string
			var hdr http.Header
			eventually(5*time.Second, func() bool { // the daemon may still be binding
				code, body, hdr = previewGet(t, g, link, hostForm, "/sub/page.txt?x=1")
				return code == 200
			})
			if code != 200 || body != marker {
				t.Errorf("host form %v: %d %q, want the app's %q", hostForm, code, body, marker)
			}
			// The path form on the gateway's origin is confined.
			if csp := hdr.Get("Content-Security-Policy"); !hostForm && csp != "sandbox allow-scripts allow-forms allow-popups" {
				t.Errorf("path form on the gateway's origin: CSP %q, want the sandbox policy", csp)
			}
		}
	}
	// The path form without its slash is sent to it (relative URLs).
	noFollow := &http.Client{Transport: a.client.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if resp, err := noFollow.Get(a.URL + "/preview/" + previewToken(t, link) + "?q=1"); err != nil || resp.StatusCode != 308 ||
		resp.Header.Get("Location") != "/preview/"+previewToken(t, link)+"/?q=1" {
		t.Errorf("path form without slash: %v %v, want a 308 to the slash", resp, err)
	} else {
		resp.Body.Close()
	}

	// SSE event by event, and a WebSocket, through links.
	checkPortSSE(t, a, thread, b.URL+"/preview/"+previewToken(t, link)+"/cgi-bin/events", "")
	startWsecho(t, a, thread, wsecho)
	wsLink := createPreview(t, a, thread, "alice", 3002, "")
	echoWebSocket(t, b, "preview host form", "ws"+strings.TrimPrefix(b.URL, "http")+"/hmr", previewToken(t, wsLink)+"."+previewSuffix, nil)
	echoWebSocket(t, b, "preview path form", "ws"+strings.TrimPrefix(b.URL, "http")+"/preview/"+previewToken(t, wsLink)+"/hmr", "", nil)

	// A link opens its port only: nothing under it reaches 3001, which a
	// link of its own does reach.
	for _, path := range []string{"/ports/3001/sub/page.txt", "/../3001/sub/page.txt", "/%2e%2e/3001/sub/page.txt", "/v1/shell/exec"} {
		for _, hostForm := range []bool{true, false} {
			if code, body, _ := previewGet(t, a, link, hostForm, path); code == 200 || strings.Contains(body, other) {
				t.Errorf("link for 3000, %s (host form %v): %d %q", path, hostForm, code, body)
			}
		}
	}
	if code, _, _ := (req{"GET", "/sub/page.txt", "3001-" + previewToken(t, link) + "." + previewSuffix, nil, nil}).do(t, a); code != 404 {
		t.Errorf("3001-{link} host: %d, want 404", code)
	}
	if code, body, _ := previewGet(t, a, createPreview(t, a, thread, "alice", 3001, "1h"), true, "/sub/page.txt"); code != 200 || body != other {
		t.Errorf("a link for 3001: %d %q, want %q", code, body, other)
	}

	// Alice's link never opens bob's sandbox: re-encoded with bob's id
	// (the signature stays alice's) it is a 404, as is any garbage.
	forged := swapSandbox(t, previewToken(t, link), identity.SandboxID("bob", thread))
	for name, tok := range map[string]string{"bob's id": forged, "truncated": previewToken(t, link)[:50], "garbage": strings.Repeat("a", 61)} {
		for _, hostForm := range []bool{true, false} {
			code, body, _ := previewGet(t, a, api.Preview{PathURL: "http://x/preview/" + tok + "/"}, hostForm, "/sub/page.txt")
			if code != 404 || strings.Contains(body, bobs) || !strings.Contains(body, "preview_not_found") {
				t.Errorf("%s (host form %v): %d %q, want the JSON 404", name, hostForm, code, body)
			}
		}
	}
	// Listing: alice sees her links (with their urls), bob sees none of hers.
	var list api.PreviewList
	if code, body, _ := call(t, "GET", b.URL+"/threads/"+thread+"/previews", nil, bearer("alice-key")...); code != 200 ||
		json.Unmarshal(body, &list) != nil || len(list.Previews) != 3 || !strings.Contains(string(body), previewToken(t, link)) {
		t.Errorf("alice's list: %d %s, want her 3 links", code, body)
	}
	if code, body, _ := call(t, "GET", b.URL+"/threads/"+thread+"/previews", nil, bearer("bob-key")...); code != 200 || strings.Contains(string(body), link.ID) {
		t.Errorf("bob's list: %d %s, want none of alice's", code, body)
	}
	if code, _, _ := call(t, "DELETE", a.URL+"/threads/"+thread+"/previews/"+link.ID, nil, bearer("bob-key")...); code != 404 {
		t.Errorf("bob revoking alice's link: %d, want 404", code)
	}

	// Key rotation (an admin): links of the old key keep working; new
	// links are signed with the new key and work on every replica.
	if code, body, _ := call(t, "POST", a.URL+"/admin/v1/preview-keys", nil, bearer("ops-key")...); code != 200 || !strings.Contains(string(body), `"key_id":2`) {
		t.Fatalf("rotate: %d %s", code, body)
	}
	var rotated api.Preview
	if !eventually(time.Second, func() bool {
		rotated = createPreview(t, a, thread, "alice", 3000, "1h")
		return linkKeyID(t, previewToken(t, rotated)) == 2
	}) {
		t.Fatal("no link signed with the new key within a second of the rotation")
	}
	for _, p := range []api.Preview{link, rotated} {
		if !eventually(time.Second, func() bool {
			code, body, _ := previewGet(t, b, p, true, "/sub/page.txt")
			return code == 200 && body == marker
		}) {
			t.Errorf("after the rotation, the link of key %d does not work on the other replica", linkKeyID(t, previewToken(t, p)))
		}
	}
	if code, body, _ := call(t, "DELETE", a.URL+"/threads/"+thread+"/previews/"+rotated.ID, nil, bearer("alice-key")...); code != 204 {
		t.Fatalf("revoke: %d %s", code, body)
	}

	// sandbox_origin (replica c): the path form there, without the CSP,
	// and nowhere else; that origin serves nothing but links.
	if code, body, hdr := (req{"GET", "/preview/" + previewToken(t, link) + "/sub/page.txt", sandboxOrigin, nil, nil}).do(t, c); code != 200 ||
		string(body) != marker || hdr.Get("Content-Security-Policy") != "" {
		t.Errorf("path form on sandbox_origin: %d %q %v", code, body, hdr)
	}
	if code, body, _ := (req{"GET", "/preview/" + previewToken(t, link) + "/sub/page.txt", "", nil, nil}).do(t, c); code != 404 || strings.Contains(string(body), marker) {
		t.Errorf("path form on the gateway's origin with sandbox_origin set: %d %q, want 404", code, body)
	}
	if code, _, _ := (req{"GET", "/threads/" + thread + "/previews", sandboxOrigin, nil, bearer("alice-key")}).do(t, c); code != 404 {
		t.Errorf("the API on sandbox_origin: %d, want 404", code)
	}

	// The CLI (the gateway binary as a user's shell runs it): create, ls, rm.
	var made api.Preview
	r := runCLI(t, f.bin, a.URL, "alice-key", "preview", "create", thread, "--port", "3000", "--ttl", "10m", "-o", "json").must(t, 0, "preview create")
	if err := json.Unmarshal([]byte(r.stdout), &made); err != nil || made.Port != 3000 {
		t.Fatalf("preview create -o json: %v %s", err, r.stdout)
	}
	if code, body, _ := previewGet(t, b, made, true, "/sub/page.txt"); code != 200 || body != marker {
		t.Errorf("the CLI's link: %d %q", code, body)
	}
	if r := runCLI(t, f.bin, a.URL, "alice-key", "preview", "ls", thread).must(t, 0, "preview ls"); !strings.Contains(r.stdout, made.ID) || !strings.Contains(r.stdout, made.URL) {
		t.Errorf("preview ls does not list the CLI's link:\n%s", r.stdout)
	}
	runCLI(t, f.bin, a.URL, "alice-key", "preview", "rm", thread, made.ID).must(t, 0, "preview rm")
	if code, _, _ := previewGet(t, a, made, true, "/sub/page.txt"); code != 404 {
		t.Errorf("the link preview rm revoked: %d, want 404", code)
	}

	// Revoked on a: 404 on b within a second.
	revoked := createPreview(t, a, thread, "alice", 3000, "1h")
	if code, _, _ := previewGet(t, b, revoked, true, "/sub/page.txt"); code != 200 {
		t.Fatalf("the link to revoke does not work: %d", code)
	}
	if code, body, _ := call(t, "DELETE", a.URL+"/threads/"+thread+"/previews/"+revoked.ID, nil, bearer("alice-key")...); code != 204 {
		t.Fatalf("revoke: %d %s", code, body)
	}
	began := time.Now()
	if !eventually(time.Second, func() bool { code, _, _ := previewGet(t, b, revoked, false, "/sub/page.txt"); return code == 404 }) {
		t.Errorf("revoked link still open on the other replica after %s", time.Since(began))
	}

	// Expired (ttl 1s): 404 on b within a second of its expiry.
	short := createPreview(t, a, thread, "alice", 3000, "1s")
	time.Sleep(time.Until(short.ExpiresAt))
	if !eventually(time.Second, func() bool { code, _, _ := previewGet(t, b, short, true, "/sub/page.txt"); return code == 404 }) {
		t.Errorf("expired link still open on the other replica")
	}

	// Destroyed and recreated (a new incarnation): the old link is dead on
	// both replicas, though the new sandbox serves the same port again.
	if code, body, _ := call(t, "DELETE", a.URL+"/threads/"+thread+"/sandbox?destroy=true", nil, bearer("alice-key")...); code != 204 {
		t.Fatalf("destroy: %d %s", code, body)
	}
	serve(b, "alice", thread, marker, "3000")
	for _, g := range []*gateway{a, b} {
		if !eventually(2*time.Second, func() bool { code, _, _ := previewGet(t, g, link, true, "/sub/page.txt"); return code == 404 }) {
			t.Errorf("a link of the destroyed incarnation opens the new one")
		}
	}
	if code, body, _ := previewGet(t, a, createPreview(t, a, thread, "alice", 3000, "1h"), true, "/sub/page.txt"); code != 200 || body != marker {
		t.Errorf("a new link to the recreated sandbox: %d %q", code, body)
	}

	// No log line of any replica holds a link.
	for _, g := range []*gateway{a, b, c} {
		for _, p := range []api.Preview{link, revoked, short, wsLink} {
			for _, line := range strings.Split(g.logs.String(), "\n") {
				if strings.Contains(line, previewToken(t, p)[:20]) {
					t.Errorf("a replica logged a preview link: %s", line)
				}
			}
		}
	}
}

var linkEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// linkKeyID is the id of the key that signed a link (its first 2 bytes).
func linkKeyID(t *testing.T, tok string) int {
	t.Helper()
	raw, err := linkEncoding.DecodeString(tok)
	if err != nil || len(raw) < 2 {
		t.Fatalf("decode link: %v", err)
	}
	return int(raw[0])<<8 | int(raw[1])
}

// swapSandbox re-encodes a link with another sandbox id, keeping its
// signature: what someone holding one link can make without the key.
func swapSandbox(t *testing.T, tok, sid string) string {
	t.Helper()
	raw, err := linkEncoding.DecodeString(tok)
	id, err2 := hex.DecodeString(sid)
	if err != nil || err2 != nil {
		t.Fatalf("decode: %v %v", err, err2)
	}
	copy(raw[2:10], id)
	return linkEncoding.EncodeToString(raw)
}
