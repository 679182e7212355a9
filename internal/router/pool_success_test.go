package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/testutil"
)

// The router over the real pool (PoolOf), a real redis-server and sandboxes
// that are real HTTP servers: the adapter hands out the pool's own routes,
// re-resolves each kind its own way, and costs no allocation.

// httpBackend runs each sandbox incarnation as an HTTP server that answers
// its incarnation's name, and only to its own secret.
type httpBackend struct {
	mu      sync.Mutex
	seq     int
	live    map[string]*httptest.Server // by incarnation
	current map[string]backend.Info     // by sandbox id
}

var _ backend.Backend = (*httpBackend)(nil)

func newHTTPBackend(t testing.TB) *httpBackend {
	b := &httpBackend{live: map[string]*httptest.Server{}, current: map[string]backend.Info{}}
	t.Cleanup(func() {
		for inc := range b.live {
			b.kill(inc)
		}
	})
	return b
}

func (b *httpBackend) Create(_ context.Context, spec backend.Spec) (backend.Info, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	inc, secret := fmt.Sprintf("inc-%d", b.seq), fmt.Sprintf("secret-%d", b.seq)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(sandboxspec.SecretHeader) != secret {
			http.Error(w, "wrong secret", http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, inc)
	}))
	b.live[inc] = srv
	info := backend.Info{SandboxID: spec.SandboxID, User: spec.User, Thread: spec.Thread, URL: srv.URL,
		Incarnation: inc, Backend: "http", Labels: spec.Labels, CreatedAt: time.Now(), Secret: secret}
	b.current[spec.SandboxID] = info
	return info, nil
}

func (b *httpBackend) Destroy(_ context.Context, info backend.Info) error {
	b.kill(info.Incarnation)
	return nil
}

func (b *httpBackend) Alive(_ context.Context, info backend.Info) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.live[info.Incarnation] != nil, nil
}

func (b *httpBackend) Discover(_ context.Context, sid string) (backend.Info, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	info, ok := b.current[sid]
	return info, ok && b.live[info.Incarnation] != nil, nil
}

func (b *httpBackend) List(context.Context) ([]backend.Info, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []backend.Info
	for _, info := range b.current {
		if b.live[info.Incarnation] != nil {
			out = append(out, info)
		}
	}
	return out, nil
}

// kill stops an incarnation behind the pool's back: its port refuses.
func (b *httpBackend) kill(inc string) {
	b.mu.Lock()
	srv := b.live[inc]
	delete(b.live, inc)
	b.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// realPool is a pool over a fresh redis-server and an httpBackend.
func realPool(t testing.TB) (*pool.Pool, *httpBackend) {
	t.Helper()
	// Routes stay cached for the whole test: a re-validation would be a
	// Redis round trip inside an allocation count.
	p, be, _ := poolOf(t, pool.Config{CacheTTL: time.Hour})
	return p, be
}

// poolOf is a pool of cfg, on a fresh data directory, over a fresh
// redis-server and an httpBackend; and its store.
func poolOf(t testing.TB, cfg pool.Config) (*pool.Pool, *httpBackend, *statedb.Store) {
	t.Helper()
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	be := newHTTPBackend(t)
	store := statedb.NewStore(rdb, "")
	cfg.Mounts.DataDir = t.TempDir()
	p, err := pool.New(cfg, pool.Deps{Store: store, Backend: be, BackendName: "http"})
	if err != nil {
		t.Fatal(err)
	}
	return p, be, store
}

func TestPoolOfServesAndReacquires(t *testing.T) {
	t.Parallel()
	p, be := realPool(t)
	gw := httptest.NewServer(New(Deps{Pool: PoolOf(p), Aliases: stubPool{}}))
	t.Cleanup(gw.Close)
	do := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, gw.URL+path, nil)
		resp, err := gw.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	// The control plane reads the route's identity.
	status, body := do("PUT", "/threads/t1/sandbox")
	var view api.Sandbox
	if err := json.Unmarshal([]byte(body), &view); status != 200 || err != nil {
		t.Fatalf("PUT: %d %s", status, body)
	}
	sid := identity.SandboxID(auth.Local().User, "t1")
	capPath := strings.TrimPrefix(view.SandboxURL, gw.URL)
	if view.SandboxID != sid || view.Thread != "t1" || view.User != auth.Local().User || view.Backend != "http" ||
		view.CreatedAt.IsZero() || !strings.HasPrefix(capPath, capabilityRoot) {
		t.Fatalf("sandbox view: %+v", view)
	}

	steps := []struct {
		name, path   string
		kill         string // the incarnation killed first
		status       int
		body, reason string
	}{
		{name: "thread", path: "/threads/t1/v1/sandbox", status: 200, body: "inc-1"},
		{name: "sandbox by id", path: "/sandboxes/" + sid + "/v1/sandbox", status: 200, body: "inc-1"},
		{name: "capability", path: capPath + "/v1/sandbox", status: 200, body: "inc-1"},
		{name: "capability of a dead incarnation", path: capPath + "/v1/sandbox", kill: "inc-1", status: 404,
			reason: "a capability never outlives its incarnation (RecheckCapability)"},
		{name: "thread after its sandbox died", path: "/threads/t1/v1/sandbox", status: 200, body: "inc-2",
			reason: "the thread's sandbox is recreated (Reacquire)"},
		{name: "sandbox by id, the new incarnation", path: "/sandboxes/" + sid + "/v1/sandbox", status: 200, body: "inc-2"},
	}
	for _, s := range steps {
		if s.kill != "" {
			be.kill(s.kill)
		}
		status, body := do("GET", s.path)
		if status != s.status || s.body != "" && body != s.body {
			t.Fatalf("%s: %d %s, want %d %s: %s", s.name, status, body, s.status, s.body, s.reason)
		}
	}
}

// routesOnAHotPool is the router's view of a real pool whose route of
// (default, t1) is cached, with its capability.
func routesOnAHotPool(tb testing.TB) (Routes, string, string) {
	tb.Helper()
	p, _ := realPool(tb)
	routes := PoolOf(p)
	sb, _, err := routes.Acquire(context.Background(), auth.Local().User, "t1")
	if err != nil {
		tb.Fatal(err)
	}
	sid := sb.Identity().SandboxID
	capability, err := p.Capability(context.Background(), sid)
	if err != nil {
		tb.Fatal(err)
	}
	if _, _, err := routes.CapabilityRoute(context.Background(), capability); err != nil {
		tb.Fatal(err)
	}
	return routes, sid, capability
}

// The data plane's look-ups through the adapter: a cached route, converted
// to a Sandbox and marked in flight, allocates nothing.
func TestPoolOfCachedRoutesDoNotAllocate(t *testing.T) {
	routes, sid, capability := routesOnAHotPool(t)
	ctx, who := context.Background(), auth.Local()
	for _, c := range []struct {
		name string
		get  func() (Sandbox, pool.Outcome, error)
	}{
		{"acquire", func() (Sandbox, pool.Outcome, error) { return routes.Acquire(ctx, who.User, "t1") }},
		{"route by id", func() (Sandbox, pool.Outcome, error) { return routes.Route(ctx, sid, who) }},
		{"capability", func() (Sandbox, pool.Outcome, error) { return routes.CapabilityRoute(ctx, capability) }},
	} {
		allocs := testing.AllocsPerRun(1000, func() {
			sb, o, err := c.get()
			if err != nil || o != pool.OutcomeHit {
				t.Fatalf("%s: %v %v", c.name, o, err)
			}
			sb.Begin()
			sb.End()
		})
		if allocs != 0 {
			t.Errorf("%s through PoolOf allocates %.1f times", c.name, allocs)
		}
	}
}

// BenchmarkPoolOfAcquireCached is the data plane's cached look-up through
// the adapter (compare with pool's BenchmarkAcquireCached and
// BenchmarkRouteByIDCached).
func BenchmarkPoolOfAcquireCached(b *testing.B) {
	routes, sid, _ := routesOnAHotPool(b)
	ctx, who := context.Background(), auth.Local()
	for _, c := range []struct {
		name string
		get  func() (Sandbox, pool.Outcome, error)
	}{
		{"acquire", func() (Sandbox, pool.Outcome, error) { return routes.Acquire(ctx, who.User, "t1") }},
		{"route-by-id", func() (Sandbox, pool.Outcome, error) { return routes.Route(ctx, sid, who) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sb, _, _ := c.get()
				sb.Begin()
				sb.End()
			}
		})
	}
}
