package pool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/statedb"
)

// claimingBackend is the fake backend with Claim: the entry moves from the
// pre-started id to the thread's, as a rename of the runtime object would.
type claimingBackend struct {
	*fakeBackend
	claimErr error
}

func (c *claimingBackend) Bind(_ context.Context, warm backend.Info, spec backend.Spec) (backend.Info, error) {
	if c.claimErr != nil {
		return backend.Info{}, c.claimErr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	info, ok := c.live[warm.SandboxID]
	if !ok || info.Incarnation != warm.Incarnation {
		return backend.Info{}, errors.New("gone")
	}
	delete(c.live, warm.SandboxID)
	info.SandboxID, info.User, info.Thread, info.Labels = spec.SandboxID, spec.User, spec.Thread, spec.Labels
	c.live[spec.SandboxID] = info
	return info, nil
}

// Create makes the host dirs, as the backends that can claim do.
func (c *claimingBackend) Create(ctx context.Context, spec backend.Spec) (backend.Info, error) {
	if err := backend.EnsureHostDirs(spec.Mounts); err != nil {
		return backend.Info{}, err
	}
	return c.fakeBackend.Create(ctx, spec)
}

var _ backend.Binder = (*claimingBackend)(nil)

func prewarmEnv(t *testing.T, cfg Config, claimErr error) (*env, *Pool, *claimingBackend) {
	t.Helper()
	e := newEnv(t, cfg)
	cb := &claimingBackend{fakeBackend: e.be, claimErr: claimErr}
	p := e.replicaWith(func(d *Deps) { d.Backend = cb })
	if err := NewPrewarmer(p).Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	return e, p, cb
}

func prewarmCount(t *testing.T, p *Pool) int64 {
	t.Helper()
	c, err := p.store.Count(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return c.Prewarm
}

// TestPrewarmClaimAndFallbacks: a new thread claims a pre-started sandbox;
// a failed claim, or one made from another configuration, costs the
// pre-started sandbox and the thread is created cold; a thread with files of
// its own is never given one.
func TestPrewarmClaimAndFallbacks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		claimErr    error
		otherConfig bool
		threadData  bool
		want        Outcome
		wantLeft    int64 // pre-started sandboxes left before the refill
	}{
		{name: "claimed", want: OutcomePrewarm, wantLeft: 1},
		{name: "claim fails", claimErr: errors.New("boom"), want: OutcomeCold, wantLeft: 1},
		{name: "made from another configuration", otherConfig: true, want: OutcomeCold, wantLeft: 1},
		{name: "thread has data", threadData: true, want: OutcomeCold, wantLeft: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, p, cb := prewarmEnv(t, Config{Prewarm: 2, MaxSandboxes: -1}, tc.claimErr)
			if n := prewarmCount(t, p); n != 2 {
				t.Fatalf("refill made %d, want 2", n)
			}
			if tc.otherConfig {
				cfg := e.cfg
				cfg.Env = map[string]string{"CHANGED": "1"}
				e.cfg = cfg
				p = e.replicaWith(func(d *Deps) { d.Backend = cb })
			}
			if tc.threadData {
				dir := filepath.Join(backend.ThreadDir(e.cfg.Mounts.DataDir, "u", "t"), "workspace")
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r, o, err := p.Acquire(t.Context(), "u", "t")
			if err != nil || o != tc.want {
				t.Fatalf("Acquire = %v %v, want %v", o, err, tc.want)
			}
			sid := identity.SandboxID("u", "t")
			if r.SandboxID != sid || r.User != "u" || r.Thread != "t" {
				t.Fatalf("route %+v", r)
			}
			if got := cb.count(cb.creates, sid); (tc.want == OutcomeCold) != (got == 1) {
				t.Fatalf("cold creates of the thread = %d", got)
			}
			if n := prewarmCount(t, p); n != tc.wantLeft {
				t.Fatalf("%d pre-started left, want %d", n, tc.wantLeft)
			}
			if got := cb.liveCount(); got != int(tc.wantLeft)+1 {
				t.Fatalf("%d sandboxes live, want %d: a failed claim must destroy its pre-started sandbox", got, tc.wantLeft+1)
			}
			rec, ok, err := p.Record(t.Context(), sid)
			if err != nil || !ok || rec.User != "u" || rec.Thread != "t" || rec.Prewarm != "" {
				t.Fatalf("thread's record %+v %v %v", rec, ok, err)
			}
			if err := NewPrewarmer(p).Pass(t.Context()); err != nil {
				t.Fatal(err)
			}
			if n := prewarmCount(t, p); n != 2 {
				t.Fatalf("after the refill %d, want 2", n)
			}
		})
	}
}

// TestPrewarmCapacity: pre-started sandboxes fill free capacity only, are
// evicted first by a create at the cap, and are trimmed when the pool
// shrinks.
func TestPrewarmCapacity(t *testing.T) {
	t.Parallel()
	e, p, cb := prewarmEnv(t, Config{Prewarm: 3, MaxSandboxes: 2, HardCap: true}, nil)
	if n := prewarmCount(t, p); n != 2 {
		t.Fatalf("refill under a cap of 2 made %d, want 2", n)
	}
	// A thread with data cannot claim: its create evicts a pre-started one.
	dir := filepath.Join(backend.ThreadDir(e.cfg.Mounts.DataDir, "u", "full"), "workspace")
	_ = os.MkdirAll(dir, 0o700)
	_ = os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600)
	if _, o, err := p.Acquire(t.Context(), "u", "full"); err != nil || o != OutcomeCold {
		t.Fatalf("create at the cap = %v %v", o, err)
	}
	if n := prewarmCount(t, p); n != 1 || cb.liveCount() != 2 {
		t.Fatalf("after the create at the cap: %d pre-started, %d live; want 1 and 2", n, cb.liveCount())
	}
	// A new thread at the full cap still claims the last one.
	if _, o, err := p.Acquire(t.Context(), "u", "new"); err != nil || o != OutcomePrewarm {
		t.Fatalf("claim at the cap = %v %v", o, err)
	}
	if err := NewPrewarmer(p).Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := prewarmCount(t, p); n != 0 || cb.liveCount() != 2 {
		t.Fatalf("refill at the cap: %d pre-started, %d live; want none over the cap", n, cb.liveCount())
	}
	// Shrinking the pool trims it.
	e2, p2, cb2 := prewarmEnv(t, Config{Prewarm: 3, MaxSandboxes: -1}, nil)
	e2.cfg.Prewarm = 1
	small := e2.replicaWith(func(d *Deps) { d.Backend = cb2 })
	if err := NewPrewarmer(small).Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := prewarmCount(t, p2); n != 1 || cb2.liveCount() != 1 {
		t.Fatalf("after shrinking to 1: %d pre-started, %d live", n, cb2.liveCount())
	}
}

// A pre-started pool on a backend that cannot bind one is refused at start,
// naming why, rather than silently never filled.
func TestPrewarmNeedsABinder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Prewarm: 2})
	rdb := e.rdb()
	_, err := New(e.cfg, Deps{Store: statedb.NewStore(rdb, ""), Backend: struct{ backend.Backend }{e.be}, BackendName: "remote", Clock: e.clock})
	if !errors.Is(err, backend.ErrNotSupported) || !strings.Contains(err.Error(), "remote") {
		t.Fatalf("New = %v, want a named not-supported error", err)
	}
}
