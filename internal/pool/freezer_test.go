package pool

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/state"
)

// The freezer's decisions on a fake backend and a real Redis: a sandbox is
// frozen only once unused for FreezeAfter, once; one running a command is
// left running (and touched, so idle expiry spares it too); one with a
// request in flight on a replica is left; the next acquire on another
// replica thaws it.
func TestFreezerFreezesIdleAndThawsOnAcquire(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{FreezeAfter: 10 * time.Second, CacheTTL: time.Second, TouchInterval: time.Second, IdleTimeout: time.Hour})
	p1, p2 := e.replica(), e.replica()
	ctx := context.Background()
	sid := identity.SandboxID("u", "t")
	r, _, err := p1.Acquire(ctx, "u", "t")
	if err != nil {
		t.Fatal(err)
	}
	p1.Wait() // the create's lock is let go after the answer
	pass := func(want int) {
		t.Helper()
		if n, err := NewFreezer(p1).Pass(ctx); n != want || err != nil {
			t.Fatalf("freezer pass: froze %d (err %v), want %d", n, err, want)
		}
	}
	freezer := NewFreezer(p1)
	e.clock.Advance(5 * time.Second)
	if n, _ := freezer.Pass(ctx); n != 0 || e.be.isPaused(sid) {
		t.Fatal("froze a sandbox used 5 s ago (freeze_after 10 s)")
	}

	// Busy: a command runs. Left running, and touched.
	e.be.commands.Store(1)
	e.clock.Advance(20 * time.Second)
	pass(0)
	if e.be.isPaused(sid) {
		t.Fatal("froze a sandbox running a command")
	}
	if seen, _, _ := p1.store.Activity(ctx, sid); !seen.Equal(e.clock.Now()) {
		t.Fatalf("a busy sandbox's activity was not renewed: %v, now %v", seen, e.clock.Now())
	}
	e.be.commands.Store(0)

	// In flight here: left.
	r.Begin()
	e.clock.Advance(20 * time.Second)
	pass(0)
	r.End()

	e.clock.Advance(20 * time.Second)
	if n, err := freezer.Pass(ctx); n != 1 || err != nil || !e.be.isPaused(sid) {
		t.Fatalf("idle sandbox not frozen: %d %v", n, err)
	}
	if rec, _, _ := p1.store.Get(ctx, sid); rec.Frozen.IsZero() {
		t.Fatal("frozen sandbox not marked in its record")
	}
	if n, _ := freezer.Pass(ctx); n != 0 {
		t.Fatal("froze a frozen sandbox again")
	}

	r2, outcome, err := p2.Acquire(ctx, "u", "t")
	if err != nil || outcome != OutcomeThawed || r2 == nil {
		t.Fatalf("acquire of a frozen sandbox: %v %v", outcome, err)
	}
	if e.be.isPaused(sid) {
		t.Fatal("acquire did not thaw the sandbox")
	}
	if rec, _, _ := p1.store.Get(ctx, sid); !rec.Frozen.IsZero() {
		t.Fatal("thawed sandbox still marked frozen")
	}
	if e.be.creates[sid] != 1 {
		t.Fatalf("%d creates, want 1", e.be.creates[sid])
	}

	// Frozen, then killed behind the gateway's back: the thaw fails, the
	// record is dropped and the next acquire creates a new sandbox.
	p2.Wait()
	e.clock.Advance(20 * time.Second)
	if n, err := NewFreezer(p1).Pass(ctx); n != 1 || err != nil {
		t.Fatalf("refreeze: %d %v", n, err)
	}
	e.be.kill(sid)
	if _, outcome, err := p1.Acquire(ctx, "u", "t"); err != nil || outcome != OutcomeCold {
		t.Fatalf("acquire of a frozen sandbox that died: %v %v, want a cold create", outcome, err)
	}
}

// Hold freezes a running sandbox around fn and thaws it after; it refuses
// a busy one unless forced; a thread without a sandbox just runs fn.
func TestHold(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := e.replica()
	ctx := context.Background()
	sid := identity.SandboxID("u", "h")
	ran := false
	if err := NewHolder(p).Hold(ctx, "u", "h", false, func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("hold without a sandbox: %v %v", ran, err)
	}
	if _, _, err := p.Acquire(ctx, "u", "h"); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	var pausedInside, markedInside bool
	err := NewHolder(p).Hold(ctx, "u", "h", false, func() error {
		rec, _, _ := p.store.Get(ctx, sid)
		pausedInside, markedInside = e.be.isPaused(sid), !rec.Frozen.IsZero()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Marked while held: a replica dying inside leaves the next request
	// to thaw it.
	if !pausedInside || !markedInside || e.be.isPaused(sid) {
		t.Fatalf("hold: paused inside %v, marked inside %v, paused after %v", pausedInside, markedInside, e.be.isPaused(sid))
	}
	if rec, _, _ := p.store.Get(ctx, sid); !rec.Frozen.IsZero() {
		t.Fatal("the freeze mark outlived the hold")
	}
	e.be.commands.Store(2)
	if err := NewHolder(p).Hold(ctx, "u", "h", false, func() error { t.Fatal("ran under a busy sandbox"); return nil }); !errors.Is(err, ErrBusy) {
		t.Fatalf("hold of a busy sandbox: %v, want ErrBusy", err)
	}
	if err := NewHolder(p).Hold(ctx, "u", "h", true, func() error { pausedInside = e.be.isPaused(sid); return nil }); err != nil || !pausedInside {
		t.Fatalf("forced hold: %v, paused inside %v", err, pausedInside)
	}
}

// A sandbox whose record was lost while it was frozen is adopted running:
// the reconciler resumes it before the warm pool can hand it out.
func TestReconcilerResumesAdoptedFrozenSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{ReconcileGrace: time.Minute})
	p := e.replica()
	ctx := context.Background()
	r, _, err := p.Acquire(ctx, "u", "lost")
	if err != nil {
		t.Fatal(err)
	}
	p.Wait()
	info, _, _ := e.be.Discover(ctx, r.SandboxID)
	if err := e.be.Freeze(ctx, info); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb().Del(ctx, p.store.Keys().Sandbox(r.SandboxID)).Err(); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute)
	if rep, err := NewReconciler(p).Pass(ctx); err != nil || rep.Adopted != 1 {
		t.Fatalf("reconcile: %+v %v", rep, err)
	}
	if e.be.isPaused(r.SandboxID) {
		t.Fatal("adopted a frozen sandbox into the warm pool without resuming it")
	}
}

// Idle expiry spares a sandbox that runs a command (an async exec outlives
// its request): it is asked first, and its activity renewed; once the
// command ends it expires as any other.
func TestReaperSparesRunningCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{IdleTimeout: time.Minute})
	p := e.replica()
	ctx := context.Background()
	r, _, err := p.Acquire(ctx, "u", "cmd")
	if err != nil {
		t.Fatal(err)
	}
	p.Wait()
	e.be.commands.Store(1)
	e.clock.Advance(2 * time.Minute)
	if n, err := NewReaper(p).Pass(ctx); n != 0 || err != nil {
		t.Fatalf("reaped %d (%v) while a command runs", n, err)
	}
	if seen, _, _ := p.store.Activity(ctx, r.SandboxID); !seen.Equal(e.clock.Now()) {
		t.Fatalf("activity not renewed: %v, now %v", seen, e.clock.Now())
	}
	e.be.commands.Store(0)
	e.clock.Advance(2 * time.Minute)
	if n, err := NewReaper(p).Pass(ctx); n != 1 || err != nil {
		t.Fatalf("reaped %d (%v) once the command ended, want 1", n, err)
	}
}

// A template's freeze_after replaces the fleet's for its sandboxes: one
// with a short delay freezes while the fleet's default sandbox (no
// template) does not, one of `never` is never frozen, and a template's
// delay freezes its own when the fleet freezes nothing.
func TestTemplateFreezeAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := func(cfg Config, threads ...string) (*env, *Pool, map[string]string) {
		t.Helper()
		e := newEnv(t, cfg)
		p := e.replica()
		sid := map[string]string{}
		for _, th := range threads {
			if th != "fleet" {
				if err := p.SetOptions(ctx, "u", th, Options{Template: th}); err != nil {
					t.Fatal(err)
				}
			}
			r, _, err := p.Acquire(ctx, "u", th)
			if err != nil {
				t.Fatal(err)
			}
			sid[th] = r.SandboxID
		}
		p.Wait()
		return e, p, sid
	}
	base := Config{CacheTTL: time.Second, TouchInterval: time.Second, IdleTimeout: -1}

	cfg := base
	cfg.FreezeAfter = 10 * time.Minute
	cfg.Templates = []Template{{Name: "quick", FreezeAfter: time.Minute}, {Name: "slow", FreezeAfter: 30 * time.Minute},
		{Name: "keep", FreezeAfter: -1}}
	e, p, sid := start(cfg, "quick", "slow", "keep", "fleet")
	freezer := NewFreezer(p)
	for _, step := range []struct {
		advance time.Duration
		frozen  []string // all frozen after this step
	}{
		{30 * time.Second, nil},
		{time.Minute, []string{"quick"}},
		{5 * time.Minute, []string{"quick"}},
		{5 * time.Minute, []string{"quick", "fleet"}},
		{20 * time.Minute, []string{"quick", "fleet", "slow"}},
		{1000 * time.Hour, []string{"quick", "fleet", "slow"}},
	} {
		e.clock.Advance(step.advance)
		if _, err := freezer.Pass(ctx); err != nil {
			t.Fatal(err)
		}
		for th, id := range sid {
			if want := slices.Contains(step.frozen, th); e.be.isPaused(id) != want {
				t.Fatalf("after %s more: %s frozen %v, want %v", step.advance, th, e.be.isPaused(id), want)
			}
		}
	}
	if rec, _, _ := p.store.Get(ctx, sid["keep"]); !rec.Frozen.IsZero() {
		t.Fatal("a template with freeze_after never was marked frozen")
	}
	// Incremental per delay: what every window has passed (the never
	// sandbox, the frozen ones) is not read again, however many passes.
	counted := &countingFreezerStore{freezerStore: freezer.p.store}
	freezer.p.store = counted
	for range 3 {
		e.clock.Advance(time.Hour)
		if n, err := freezer.Pass(ctx); n != 0 || err != nil {
			t.Fatalf("a later pass froze %d (%v)", n, err)
		}
	}
	if counted.idle != 0 || counted.gets != 0 {
		t.Fatalf("later passes read %d idle entries and %d records, want none", counted.idle, counted.gets)
	}

	// The fleet freezes nothing; a template's delay still freezes its own.
	cfg = base
	cfg.Templates = []Template{{Name: "quick", FreezeAfter: time.Minute}}
	e, p, sid = start(cfg, "quick", "fleet")
	e.clock.Advance(1000 * time.Hour)
	if n, err := NewFreezer(p).Pass(ctx); n != 1 || err != nil || !e.be.isPaused(sid["quick"]) || e.be.isPaused(sid["fleet"]) {
		t.Fatalf("fleet never, template 1m, 1000h idle: froze %d (%v), want the template's only", n, err)
	}
}

// countingFreezerStore counts what a freezer reads.
type countingFreezerStore struct {
	freezerStore
	idle, gets int
}

func (c *countingFreezerStore) IdleSince(ctx context.Context, buckets []int, from map[int]time.Time, to time.Time, limit int64) ([][]state.Idle, error) {
	out, err := c.freezerStore.IdleSince(ctx, buckets, from, to, limit)
	for _, l := range out {
		c.idle += len(l)
	}
	return out, err
}

func (c *countingFreezerStore) Get(ctx context.Context, sid string) (state.Record, bool, error) {
	c.gets++
	return c.freezerStore.Get(ctx, sid)
}
