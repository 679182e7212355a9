package router

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/telemetry"
)

func hashOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// testAuth has alice (threads), ops (admin) and prom (no scope).
func testAuth(t testing.TB) *auth.Authenticator {
	t.Helper()
	a, err := auth.New(context.Background(), auth.Config{APIKeys: []auth.APIKey{
		{Name: "alice", SHA256: hashOf("alice-key"), Scopes: auth.ScopeThreads},
		{Name: "ops", SHA256: hashOf("ops-key"), Scopes: auth.ScopeAdmin},
		{Name: "prom", SHA256: hashOf("prom-key")},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAuthenticationAndScopes checks who gets past the guard on every kind
// of route; the pool behind is down, so a request that gets through answers
// 503 (data and control plane) and never reaches a sandbox.
func TestAuthenticationAndScopes(t *testing.T) {
	t.Parallel()
	down := stubPool{err: fmt.Errorf("%w: x", pool.ErrState)}
	srv := httptest.NewServer(New(Deps{Pool: down, Aliases: down, Auth: testAuth(t), Metrics: telemetry.NewMetrics()}))
	defer srv.Close()
	bearer := func(k string) []string { return []string{"Authorization", "Bearer " + k} }
	cases := []struct {
		method, path string
		hdr          []string
		status       int
	}{
		{"GET", "/healthz", nil, 200},
		{"GET", "/health", nil, 200},
		{"GET", "/metrics", nil, 401},
		{"GET", "/metrics", bearer("prom-key"), 200},
		{"GET", "/metrics", bearer("alice-key"), 200},
		{"POST", "/threads/t/v1/shell/exec", nil, 401},
		{"POST", "/threads/t/v1/shell/exec", bearer("wrong"), 401},
		{"POST", "/threads/t/v1/shell/exec", []string{"Authorization", "Basic YWxpY2U6eA=="}, 401},
		{"POST", "/threads/t/v1/shell/exec", []string{"X-API-Key", "alice-key"}, 401}, // X-API-Key is the provisioner API's only
		{"POST", "/threads/t/v1/shell/exec", bearer("prom-key"), 403},
		{"POST", "/threads/t/v1/shell/exec", bearer("alice-key"), 503},
		{"POST", "/threads/t/v1/shell/exec", bearer("ops-key"), 503},
		{"GET", "/sandboxes/0123456789abcdef/v1/sandbox", nil, 401},
		{"GET", "/sandboxes/0123456789abcdef/v1/sandbox", bearer("alice-key"), 503},
		{"PUT", "/threads/t/sandbox", nil, 401},
		{"PUT", "/threads/t/sandbox", bearer("prom-key"), 403},
		{"PUT", "/threads/t/sandbox", bearer("alice-key"), 503},
		{"GET", "/api/sandboxes", nil, 401},
		{"GET", "/api/sandboxes", []string{"X-API-Key", "alice-key"}, 503},
		{"GET", "/api/capabilities", []string{"X-API-Key", "alice-key"}, 200},
		{"GET", "/api/capabilities", nil, 401},
		{"POST", "/api/sandboxes", append([]string{"Content-Type", "application/json"}, bearer("alice-key")...), 400},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(`{}`))
		for i := 0; i+1 < len(c.hdr); i += 2 {
			req.Header.Set(c.hdr[i], c.hdr[i+1])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s %v: %d %s, want %d", c.method, c.path, c.hdr, resp.StatusCode, body, c.status)
		}
		if c.status == 401 && (resp.Header.Get("WWW-Authenticate") == "" || !strings.Contains(string(body), `"unauthorized"`)) {
			t.Errorf("%s %s: 401 without WWW-Authenticate or JSON code: %s", c.method, c.path, body)
		}
		if strings.Contains(string(body), "-key") {
			t.Errorf("%s %s: a credential is echoed: %s", c.method, c.path, body)
		}
	}
}

// TestProvisionerActsForOthersOnlyAsAdmin: user_id other than the caller's
// own is refused before anything is created.
func TestProvisionerActsForOthersOnlyAsAdmin(t *testing.T) {
	t.Parallel()
	down := stubPool{err: fmt.Errorf("%w: x", pool.ErrState)}
	srv := httptest.NewServer(New(Deps{Pool: down, Aliases: down, Auth: testAuth(t)}))
	defer srv.Close()
	for _, c := range []struct {
		key, user string
		status    int
	}{
		{"alice-key", "bob", 403},
		{"alice-key", "alice", 503},
		{"alice-key", "", 503},
		{"ops-key", "bob", 503},
	} {
		body := fmt.Sprintf(`{"sandbox_id":"s1","thread_id":"t1","user_id":%q}`, c.user)
		req, _ := http.NewRequest("POST", srv.URL+"/api/sandboxes", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", c.key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s creating for %q: %d, want %d", c.key, c.user, resp.StatusCode, c.status)
		}
	}
	// A create body is bounded.
	req, _ := http.NewRequest("POST", srv.URL+"/api/sandboxes", strings.NewReader(`{"sandbox_id":"`+strings.Repeat("x", 1<<20)+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", "alice-key")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("1 MiB create body: %d, want 413", resp.StatusCode)
	}
}

// blockingPool holds every Acquire until release is closed.
type blockingPool struct {
	stubPool
	entered chan string
	release chan struct{}
}

func (b blockingPool) Acquire(ctx context.Context, user, _ string) (Sandbox, pool.Outcome, error) {
	b.entered <- user
	<-b.release
	return nil, "", fmt.Errorf("%w: x", pool.ErrState)
}

func TestRequestsInFlightPerUser(t *testing.T) {
	t.Parallel()
	bp := blockingPool{stubPool: stubPool{err: pool.ErrNotFound}, entered: make(chan string, 8), release: make(chan struct{})}
	srv := httptest.NewServer(New(Deps{Pool: bp, Aliases: bp, Auth: testAuth(t), Limits: NewLimits(LimitsConfig{MaxRequests: 2})}))
	defer srv.Close()
	do := func(key, path string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); do("alice-key", "/threads/t/v1/sandbox") }()
	}
	<-bp.entered
	<-bp.entered
	if code, retry := do("alice-key", "/threads/t/v1/sandbox"); code != 429 || retry == "" {
		t.Errorf("third request in flight: %d Retry-After %q, want 429 with Retry-After", code, retry)
	}
	if code, _ := do("alice-key", "/threads/t/sandbox"); code != 429 {
		t.Errorf("control plane over the limit: %d", code)
	}
	// Admins are not limited per user.
	wg.Add(1)
	go func() { defer wg.Done(); do("ops-key", "/threads/t/v1/sandbox") }()
	select {
	case <-bp.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("an admin request was held back")
	}
	close(bp.release)
	wg.Wait()
	if code, _ := do("alice-key", "/threads/t/sandbox"); code != 404 {
		t.Errorf("after the others ended: %d, want 404 (the limit was given back)", code)
	}
}

func TestThreadPatternsAreEnforced(t *testing.T) {
	t.Parallel()
	down := stubPool{err: fmt.Errorf("%w: x", pool.ErrState)}
	p := auth.NewPrincipal("carol", auth.ScopeThreads, []string{"proj-*"})
	srv := httptest.NewServer(New(Deps{Pool: down, Aliases: down, Auth: fixedAuth{p}}))
	defer srv.Close()
	for path, want := range map[string]int{
		"/threads/proj-1/v1/sandbox": 503, "/threads/other/v1/sandbox": 403,
		"/threads/proj-1/sandbox": 503, "/threads/other/sandbox": 403,
	} {
		if code, _ := get(t, srv, path); code != want {
			t.Errorf("%s: %d, want %d", path, code, want)
		}
	}
}

// fixedAuth admits every request as p.
type fixedAuth struct{ p *auth.Principal }

func (f fixedAuth) Authenticate(*http.Request, bool) (*auth.Principal, error) { return f.p, nil }

func TestAdmitWithAPIKeyDoesNotAllocate(t *testing.T) {
	rt := New(Deps{Pool: stubPool{}, Aliases: stubPool{}, Auth: testAuth(t), Limits: NewLimits(LimitsConfig{})})
	req := httptest.NewRequest("GET", "/threads/t/v1/sandbox", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	allocs := testing.AllocsPerRun(1000, func() {
		p, slot, err := rt.admit(req, threads)
		if err != nil || p.User != "alice" || slot == nil {
			t.Fatal(p, err)
		}
		rt.limits.end(slot)
	})
	if allocs != 0 {
		t.Fatalf("admitting a request with an API key allocates %.1f times", allocs)
	}
}

// TestForUserOnlyForAdmins attacks ?user= on the thread routes: a user
// naming another user is refused, never served as that user nor served
// their own thread of that name; an admin acts as the user named.
func TestForUserOnlyForAdmins(t *testing.T) {
	t.Parallel()
	alice := auth.NewPrincipal("alice", auth.ScopeThreads, nil)
	admin := auth.NewPrincipal("ops", auth.ScopeAdmin, nil)
	for _, tc := range []struct {
		name  string
		p     *auth.Principal
		query string
		as    string // the user the handler ran as; "" = it did not run
		err   error
	}{
		{"own, no query", alice, "", "alice", nil},
		{"own, named", alice, "?user=alice", "alice", nil},
		{"another user's", alice, "?user=bob", "", errOtherUser},
		{"admin as bob", admin, "?user=bob", "bob", nil},
		{"admin, own", admin, "", "ops", nil},
		{"admin, bad user", admin, "?user=a%2Fb", "", identity.ErrBadUser},
	} {
		e := echo.New()
		c := e.NewContext(httptest.NewRequest(http.MethodGet, "/threads/t1/checkpoints"+tc.query, nil), httptest.NewRecorder())
		ran := ""
		err := forUser(func(_ echo.Context, p *auth.Principal) error { ran = p.User; return nil })(c, tc.p)
		if ran != tc.as || !errors.Is(err, tc.err) {
			t.Errorf("%s: ran as %q (%v), want %q (%v)", tc.name, ran, err, tc.as, tc.err)
		}
		if got := statusOf(errOtherUser).status; tc.err == errOtherUser && got != http.StatusForbidden {
			t.Errorf("errOtherUser answers %d, want 403", got)
		}
	}
	if admin.As("bob").User != "bob" || admin.User != "ops" || !admin.As("bob").Has(auth.ScopeAdmin) {
		t.Error("As must copy, not change, the principal")
	}
}
