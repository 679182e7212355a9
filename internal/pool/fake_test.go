package pool

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/testutil"
)

// fakeBackend is a hand-written backend for the pool's logic: sandboxes are
// entries in a map, and every call is counted. The real backends have their
// own tests; the pool's end-to-end behaviour is proven in test/e2e.
type fakeBackend struct {
	mu        sync.Mutex
	live      map[string]backend.Info // by sandbox id
	creates   map[string]int
	destroys  map[string]int
	specs     map[string]backend.Spec // each sandbox's last Create
	seq       atomic.Int64
	delay     time.Duration
	url       string
	createErr error
	clock     Clock
	paused    map[string]bool
	// progress is reported by every Create, as a backend pulling an image would.
	progress []backend.Progress
	// commands is what every sandbox reports running (sandboxspec.ActivityPath).
	commands atomic.Int64
	// idleAfter is the busy_idle_after of the last activity probe.
	idleAfter atomic.Value
	// answerIn delays every answer of the sandbox server (a hung one: longer
	// than any probe waits).
	answerIn atomic.Int64
	// probed is when each activity probe arrived.
	probed struct {
		sync.Mutex
		at []time.Time
	}
}

func newFakeBackend(t testing.TB) *fakeBackend {
	f := &fakeBackend{live: map[string]backend.Info{}, creates: map[string]int{}, destroys: map[string]int{}, specs: map[string]backend.Spec{},
		clock: realClock{}, paused: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(time.Duration(f.answerIn.Load())):
		case <-r.Context().Done():
			return
		}
		if r.URL.Path == sandboxspec.ActivityPath { // what the sandbox server answers the freezer
			f.probed.Lock()
			f.probed.at = append(f.probed.at, time.Now())
			f.probed.Unlock()
			f.idleAfter.Store(r.URL.Query().Get("busy_idle_after"))
			fmt.Fprintf(w, `{"success":true,"data":{"commands":%d,"requests":0}}`, f.commands.Load())
		}
	}))
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *fakeBackend) Create(ctx context.Context, spec backend.Spec) (backend.Info, error) {
	if report := backend.ProgressOf(ctx); report != nil {
		for _, p := range f.progress {
			report(p)
		}
	}
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return backend.Info{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.createErr != nil {
		return backend.Info{}, f.createErr
	}
	f.creates[spec.SandboxID]++
	f.specs[spec.SandboxID] = spec
	info := backend.Info{
		SandboxID: spec.SandboxID, User: spec.User, Thread: spec.Thread, URL: f.url,
		Incarnation: fmt.Sprintf("inc-%d", f.seq.Add(1)), Backend: "fake", Labels: spec.Labels, CreatedAt: f.clock.Now(),
	}
	f.live[spec.SandboxID] = info
	return info, nil
}

func (f *fakeBackend) Destroy(_ context.Context, info backend.Info) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, ok := f.live[info.SandboxID]; ok && (info.Incarnation == "" || cur.Incarnation == info.Incarnation) {
		delete(f.live, info.SandboxID)
		f.destroys[info.SandboxID]++
	}
	return nil
}

func (f *fakeBackend) Alive(_ context.Context, info backend.Info) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, ok := f.live[info.SandboxID]
	return ok && cur.Incarnation == info.Incarnation, nil
}

func (f *fakeBackend) Discover(_ context.Context, sid string) (backend.Info, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, ok := f.live[sid]
	return info, ok, nil
}

func (f *fakeBackend) List(context.Context) ([]backend.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]backend.Info, 0, len(f.live))
	for _, i := range f.live {
		out = append(out, i)
	}
	return out, nil
}

// kill makes a sandbox vanish behind the pool's back.
func (f *fakeBackend) kill(sid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.live, sid)
}

func (f *fakeBackend) count(m map[string]int, sid string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return m[sid]
}

func (f *fakeBackend) specOf(sid string) (backend.Spec, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	spec, ok := f.specs[sid]
	return spec, ok
}

func (f *fakeBackend) liveCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

func (f *fakeBackend) Freeze(_ context.Context, info backend.Info) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paused[info.SandboxID] = true
	return nil
}

func (f *fakeBackend) Thaw(_ context.Context, info backend.Info) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.paused, info.SandboxID)
	if _, ok := f.live[info.SandboxID]; !ok {
		return errors.New("resume: no such sandbox")
	}
	return nil
}

func (f *fakeBackend) isPaused(sid string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.paused[sid]
}

var (
	_ backend.Backend = (*fakeBackend)(nil)
	_ backend.Freezer = (*fakeBackend)(nil)
)

// fakeClock is moved by tests; the pool reads time only through it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// env is one Redis, one backend, and any number of replicas (pools) over them.
type env struct {
	t     testing.TB
	redis *testutil.Redis
	be    *fakeBackend
	clock *fakeClock
	cfg   Config
}

func newEnv(t testing.TB, cfg Config) *env {
	t.Helper()
	cfg.Mounts.DataDir = t.TempDir()
	e := &env{t: t, redis: testutil.StartRedis(t), be: newFakeBackend(t), clock: newFakeClock(), cfg: cfg}
	e.be.clock = e.clock
	return e
}

func (e *env) replica() *Pool { return e.replicaWith(func(*Deps) {}) }

// replicaWith is a replica whose Deps mut completes.
func (e *env) replicaWith(mut func(*Deps)) *Pool {
	e.t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
	e.t.Cleanup(func() { rdb.Close() })
	d := Deps{Store: statedb.NewStore(rdb, ""), Backend: e.be, BackendName: "fake", Clock: e.clock}
	mut(&d)
	p, err := New(e.cfg, d)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) rdb() *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr()})
	e.t.Cleanup(func() { rdb.Close() })
	return rdb
}

func mountsFor(tb testing.TB) backend.MountConfig { return backend.MountConfig{DataDir: tb.TempDir()} }
