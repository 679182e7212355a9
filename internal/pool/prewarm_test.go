package pool

import (
	"context"
	"errors"
	"fmt"
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
// a failed claim costs the pre-started sandbox and the thread is created
// cold; one made from another configuration, or a thread with files of its
// own, is never given one.
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
		// Never offered: the reservation matches fingerprints.
		{name: "made from another configuration", otherConfig: true, want: OutcomeCold, wantLeft: 2},
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

// TestPrewarmPerTemplate: each template keeps its own pre-started
// sandboxes; a thread of a template is given one of that template's (with
// its label), never another's, and a create with env of its own is made
// cold; claims move the shares toward the template in demand.
func TestPrewarmPerTemplate(t *testing.T) {
	t.Parallel()
	tpls := []Template{
		{Name: "py", Backend: backend.Template{Name: "py", Image: "py:1"}, Prewarm: 1},
		{Name: "node", Backend: backend.Template{Name: "node", Image: "node:1"}, Prewarm: 1},
	}
	e, p, cb := prewarmEnv(t, Config{Prewarm: 10, MaxSandboxes: -1, Templates: tpls, DefaultTemplate: "py"}, nil)
	refill := NewPrewarmer(p)
	if err := refill.Pass(t.Context()); err != nil { // its first look: the claims so far are not demand
		t.Fatal(err)
	}
	counts := func() map[string]int64 {
		t.Helper()
		c, err := p.store.PrewarmCounts(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	fps := prewarmFingerprints(e.cfg.withDefaults(), "fake")
	if c := counts(); c[fps["py"]] != 5 || c[fps["node"]] != 5 {
		t.Fatalf("before any claim %v, want 5 each (fps %v)", c, fps)
	}
	acquire := func(thread string, o Options, want Outcome) {
		t.Helper()
		if err := p.SetOptions(t.Context(), "u", thread, o); err != nil {
			t.Fatal(err)
		}
		r, out, err := p.Acquire(t.Context(), "u", thread)
		if err != nil || out != want {
			t.Fatalf("%s: Acquire = %v %v, want %v", thread, out, err, want)
		}
		wantTpl := o.Template
		if wantTpl == "" {
			wantTpl = "py"
		}
		if r.Template != wantTpl {
			t.Fatalf("%s: template %q, want %q", thread, r.Template, wantTpl)
		}
		info, ok, _ := cb.Discover(t.Context(), r.SandboxID)
		if !ok || info.Labels[backend.LabelTemplate] != wantTpl {
			t.Fatalf("%s: the sandbox's labels %v", thread, info.Labels)
		}
	}
	// Node five times: all of node's are taken, py's stay.
	for i := range 5 {
		acquire(fmt.Sprintf("n%d", i), Options{Template: "node"}, OutcomePrewarm)
	}
	if c := counts(); c[fps["py"]] != 5 || c[fps["node"]] != 0 {
		t.Fatalf("after five node claims %v", c)
	}
	// A third node thread finds none of node's: cold, although py has two.
	acquire("n5", Options{Template: "node"}, OutcomeCold)
	// Env of its own cannot be given to a running sandbox: cold.
	acquire("p1", Options{Env: map[string]string{"A": "1"}}, OutcomeCold)
	acquire("p2", Options{}, OutcomePrewarm)
	if spec, ok := cb.specOf(identity.SandboxID("u", "n5")); !ok || spec.Template.Image != "node:1" {
		t.Fatalf("node's cold create ran %+v", spec.Template)
	}
	// Node was claimed five times, py once: the refill gives node the
	// larger share (its 1 + 8 spare by 5+2 to 1+2: 7 to 3), and py's
	// surplus is trimmed only for the room node needs.
	if err := refill.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	if c := counts(); c[fps["node"]] != 7 || c[fps["py"]] != 3 {
		t.Fatalf("after the refill %v, want node 7 and py 3", c)
	}
}

// TestPrewarmBurst: new threads arriving together at a full pool each
// take a different pre-started sandbox: every one in the pool is claimed,
// none is lost to a race for the same one's lock.
func TestPrewarmBurst(t *testing.T) {
	t.Parallel()
	const pool, threads = 20, 100
	_, p, _ := prewarmEnv(t, Config{Prewarm: pool, MaxSandboxes: -1}, nil)
	if n := prewarmCount(t, p); n != pool {
		t.Fatalf("refill made %d, want %d", n, pool)
	}
	outcomes := make(chan Outcome, threads)
	errs := make(chan error, threads)
	start := make(chan struct{})
	for i := range threads {
		go func() {
			<-start
			_, o, err := p.Acquire(t.Context(), "u", fmt.Sprintf("burst-%d", i))
			outcomes <- o
			errs <- err
		}()
	}
	close(start)
	got := map[Outcome]int{}
	for range threads {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		got[<-outcomes]++
	}
	if got[OutcomePrewarm] != pool || got[OutcomeCold] != threads-pool {
		t.Fatalf("outcomes %v: want all %d pre-started sandboxes claimed and %d cold", got, pool, threads-pool)
	}
}
