package router

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/state"
)

// statusGateway is a gateway with the status page over a real pool and
// redis-server, API keys for alice and bob (threads) and ops (admin), and
// one sandbox each for alice (a1) and bob (b1).
type statusGateway struct {
	t          *testing.T
	url        string
	pool       *pool.Pool
	alice, bob string // sandbox ids
}

func newStatusGateway(t *testing.T) *statusGateway {
	t.Helper()
	return newStatusGatewayWith(t, nil)
}

// newStatusGatewayWith is newStatusGateway whose router has sampler.
func newStatusGatewayWith(t *testing.T, sampler MetricsSampler) *statusGateway {
	t.Helper()
	p, _, store := poolOf(t, pool.Config{})
	a, err := auth.New(context.Background(), auth.Config{APIKeys: []auth.APIKey{
		{Name: "alice", SHA256: hashOf("alice-key"), Scopes: auth.ScopeThreads},
		{Name: "bob", SHA256: hashOf("bob-key"), Scopes: auth.ScopeThreads},
		{Name: "ops", SHA256: hashOf("ops-key"), Scopes: auth.ScopeAdmin},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Deps{Pool: PoolOf(p), Aliases: stubPool{}, Auth: a,
		Status: Status{Source: store, Sessions: store}, Sampler: sampler}))
	t.Cleanup(srv.Close)
	g := &statusGateway{t: t, url: srv.URL, pool: p,
		alice: identity.SandboxID("alice", "a1"), bob: identity.SandboxID("bob", "b1")}
	for key, thread := range map[string]string{"alice-key": "a1", "bob-key": "b1"} {
		if code, body := g.do("PUT", "/threads/"+thread+"/sandbox", "", "Authorization", "Bearer "+key); code != 200 {
			t.Fatalf("PUT %s: %d %s", thread, code, body)
		}
	}
	return g
}

// do sends a request (headers as name, value pairs) and never follows a redirect.
func (g *statusGateway) do(method, path, form string, hdr ...string) (int, string) {
	g.t.Helper()
	req, _ := http.NewRequest(method, g.url+path, strings.NewReader(form))
	if form != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if loc := resp.Header.Get("Location"); loc != "" {
		body = []byte(loc)
	}
	if sc := resp.Header.Get("Set-Cookie"); method == "POST" && strings.HasPrefix(path, "/status/login") {
		body = []byte(strings.SplitN(sc, ";", 2)[0])
	}
	return resp.StatusCode, string(body)
}

// login returns a session cookie of key and the page's form token.
func (g *statusGateway) login(key string) (cookie, token string) {
	g.t.Helper()
	code, cookie := g.do("POST", "/status/login", "token="+key)
	if code != http.StatusSeeOther || !strings.HasPrefix(cookie, statusCookie+"=") {
		g.t.Fatalf("login %s: %d %q", key, code, cookie)
	}
	code, page := g.do("GET", "/status", "", "Cookie", cookie)
	m := regexp.MustCompile(`<meta name="sandgate-form-token" content="([^"]+)">`).FindStringSubmatch(page)
	if code != 200 || m == nil {
		g.t.Fatalf("page as %s: %d, no form token", key, code)
	}
	return cookie, m[1]
}

// exists says whether sid still has a live record.
func (g *statusGateway) exists(sid string) bool {
	g.t.Helper()
	rec, ok, err := g.pool.Record(context.Background(), sid)
	if err != nil {
		g.t.Fatal(err)
	}
	return ok && rec.State != state.StateDestroying
}

// TestStatusActionCSRF attacks the page's destroy: every forged or
// cross-site post is refused (403) and the sandbox stays; a user cannot act
// on another user's sandbox (404, it stays); the genuine post destroys.
func TestStatusActionCSRF(t *testing.T) {
	t.Parallel()
	g := newStatusGateway(t)
	cookie, token := g.login("alice-key")
	_, bobToken := g.login("bob-key")
	origin := g.url
	destroy := "/status/sandboxes/" + g.alice + "/destroy"
	for _, tc := range []struct {
		name, form string
		hdr        []string
		want       int
	}{
		{"no token", "", []string{"Cookie", cookie, "Origin", origin}, 403},
		{"empty token", "csrf=", []string{"Cookie", cookie, "Origin", origin}, 403},
		{"wrong token", "csrf=" + strings.Repeat("A", len(token)), []string{"Cookie", cookie, "Origin", origin}, 403},
		{"another session's token", "csrf=" + bobToken, []string{"Cookie", cookie, "Origin", origin}, 403},
		{"token in the query, not the form", "", []string{"Cookie", cookie, "Origin", origin}, 403},
		{"no Origin", "csrf=" + token, []string{"Cookie", cookie}, 403},
		{"cross-site Origin", "csrf=" + token, []string{"Cookie", cookie, "Origin", "http://evil.example"}, 403},
		{"null Origin", "csrf=" + token, []string{"Cookie", cookie, "Origin", "null"}, 403},
		{"cross-site fetch metadata", "csrf=" + token, []string{"Cookie", cookie, "Origin", origin, "Sec-Fetch-Site", "cross-site"}, 403},
		{"token without the cookie", "csrf=" + token, []string{"Origin", origin}, 401},
	} {
		path := destroy
		if tc.name == "token in the query, not the form" {
			path += "?csrf=" + url.QueryEscape(token)
		}
		if code, body := g.do("POST", path, tc.form, tc.hdr...); code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.want)
		}
		if !g.exists(g.alice) {
			t.Fatalf("%s: the forged post destroyed the sandbox", tc.name)
		}
	}

	// Alice, with a genuine form, on bob's sandbox: not found, and it stays.
	for _, action := range []string{"destroy", "freeze", "thaw", "checkpoint"} {
		if code, _ := g.do("POST", "/status/sandboxes/"+g.bob+"/"+action, "csrf="+token, "Cookie", cookie, "Origin", origin); code != 404 {
			t.Errorf("alice %s bob's sandbox: %d, want 404", action, code)
		}
		if code, body := g.do("GET", "/status/sandboxes/"+g.bob+"/"+action, "", "Cookie", cookie); code != 404 || strings.Contains(body, "b1") {
			t.Errorf("alice opens the %s form of bob's sandbox: %d", action, code)
		}
	}
	if code, body := g.do("GET", "/status/sandboxes/"+g.bob, "", "Cookie", cookie); code != 404 || strings.Contains(body, "b1") {
		t.Errorf("alice opens bob's sandbox page: %d (or it names bob's thread)", code)
	}
	if !g.exists(g.bob) {
		t.Fatal("alice destroyed bob's sandbox")
	}
	if code, _ := g.do("POST", "/status/sandboxes/"+g.alice+"/reboot", "csrf="+token, "Cookie", cookie, "Origin", origin); code != 404 {
		t.Errorf("unknown action: %d, want 404", code)
	}

	// A genuine action that fails (no freezer in this gateway) shows the
	// form again with the reason, and its status.
	code, again := g.do("POST", "/status/sandboxes/"+g.alice+"/freeze", "csrf="+token, "Cookie", cookie, "Origin", origin)
	if code != http.StatusNotImplemented || !strings.Contains(again, `role="alert"`) || !strings.Contains(again, `name="csrf" value="`+token+`"`) {
		t.Errorf("failed freeze: %d\n%s", code, again)
	}

	// Her own sandbox's page and confirmation carry the form; the post destroys.
	code, page := g.do("GET", "/status/sandboxes/"+g.alice, "", "Cookie", cookie)
	if code != 200 || !strings.Contains(page, `class="state state-active">active`) || !strings.Contains(page, `href="/status/sandboxes/`+g.alice+`/destroy"`) {
		t.Fatalf("alice's sandbox page: %d\n%s", code, page)
	}
	code, form := g.do("GET", destroy, "", "Cookie", cookie)
	if code != 200 || !strings.Contains(form, `name="csrf" value="`+token+`"`) || !strings.Contains(form, `method="post"`) {
		t.Fatalf("destroy confirmation: %d\n%s", code, form)
	}
	if code, loc := g.do("POST", destroy, "csrf="+token, "Cookie", cookie, "Origin", origin); code != 303 || loc != "/status?done=destroyed" {
		t.Fatalf("genuine destroy: %d %s", code, loc)
	}
	if g.exists(g.alice) {
		t.Fatal("the genuine destroy left the sandbox")
	}

	// An admin's session acts on anyone's; the script's post answers JSON.
	opsCookie, opsToken := g.login("ops-key")
	code, body := g.do("POST", "/status/sandboxes/"+g.bob+"/destroy", "csrf="+opsToken,
		"Cookie", opsCookie, "Origin", origin, "Accept", "application/json")
	var out map[string]string
	if err := json.Unmarshal([]byte(body), &out); code != 200 || err != nil || out["done"] != "destroyed" {
		t.Fatalf("admin destroy of bob's: %d %s", code, body)
	}
	if g.exists(g.bob) {
		t.Fatal("the admin's destroy left bob's sandbox")
	}
}

// TestStatusActionCSRFWithoutAuth: with no authentication (a laptop's
// loopback gateway) every caller is the local principal, so the form token
// is all that stops another site's page: the page sets a random id in the
// session cookie, a post without the matching token or with a foreign
// Origin is 403, and the page's own form works.
func TestStatusActionCSRFWithoutAuth(t *testing.T) {
	t.Parallel()
	p, _, store := poolOf(t, pool.Config{})
	srv := httptest.NewServer(New(Deps{Pool: PoolOf(p), Aliases: stubPool{}, Status: Status{Source: store}}))
	t.Cleanup(srv.Close)
	g := &statusGateway{t: t, url: srv.URL, pool: p}
	if code, body := g.do("PUT", "/threads/mine/sandbox", ""); code != 200 {
		t.Fatalf("PUT: %d %s", code, body)
	}
	sid := identity.SandboxID(auth.Local().User, "mine")

	resp, err := http.Get(srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sc := resp.Header.Get("Set-Cookie")
	m := regexp.MustCompile(`<meta name="sandgate-form-token" content="([^"]+)">`).FindSubmatch(page)
	if !strings.HasPrefix(sc, statusCookie+"=") || !strings.Contains(sc, "SameSite=Strict") || !strings.Contains(sc, "Path=/status") || m == nil {
		t.Fatalf("page without auth: Set-Cookie %q, token %v", sc, m != nil)
	}
	cookie, token := strings.SplitN(sc, ";", 2)[0], string(m[1])
	destroy := "/status/sandboxes/" + sid + "/destroy"
	for _, tc := range []struct {
		name, form string
		hdr        []string
	}{
		{"no cookie, no token (a foreign form)", "", []string{"Origin", srv.URL}},
		{"no token", "", []string{"Cookie", cookie, "Origin", srv.URL}},
		{"a token of another page id", "csrf=" + formToken(sessionID{1}), []string{"Cookie", cookie, "Origin", srv.URL}},
		{"foreign Origin", "csrf=" + token, []string{"Cookie", cookie, "Origin", "http://evil.example"}},
	} {
		if code, body := g.do("POST", destroy, tc.form, tc.hdr...); code != 403 {
			t.Errorf("%s: %d %s, want 403", tc.name, code, body)
		}
		if !g.exists(sid) {
			t.Fatalf("%s: the forged post destroyed the sandbox", tc.name)
		}
	}
	if code, loc := g.do("POST", destroy, "csrf="+token, "Cookie", cookie, "Origin", srv.URL); code != 303 || g.exists(sid) {
		t.Fatalf("the page's own destroy: %d %s", code, loc)
	}
}
