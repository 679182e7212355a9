package pool

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/statedb"
)

func TestWarmReclaimAndDeadWarmNeverReturned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := e.replica()
	r1, _, _ := p.Acquire(ctx, "u", "w")
	if err := p.Release(ctx, "u", "w"); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := p.Record(ctx, r1.SandboxID); rec.State != state.StateWarm {
		t.Fatalf("state after release: %s", rec.State)
	}
	r2, o, err := p.Acquire(ctx, "u", "w")
	if err != nil || o != OutcomeWarm || r2.Incarnation != r1.Incarnation {
		t.Fatalf("reclaim: %v %v same=%v", o, err, r2.Incarnation == r1.Incarnation)
	}
	if rec, _, _ := p.Record(ctx, r1.SandboxID); rec.State != state.StateActive {
		t.Fatalf("state after reclaim: %s", rec.State)
	}
	// A warm sandbox that died while parked is dropped and replaced, never handed out.
	_ = p.Release(ctx, "u", "w")
	e.be.kill(r1.SandboxID)
	r3, o, err := p.Acquire(ctx, "u", "w")
	if err != nil || o != OutcomeCold || r3.Incarnation == r1.Incarnation {
		t.Fatalf("dead warm: %v %v", o, err)
	}
	if err := p.Release(ctx, "u", "never-acquired"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("release unknown: %v", err)
	}
}

func TestIdleExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{IdleTimeout: 10 * time.Minute})
	p := e.replica()
	active, _, _ := p.Acquire(ctx, "u", "active")
	warm, _, _ := p.Acquire(ctx, "u", "warm")
	e.clock.Advance(5 * time.Minute)
	_ = p.Release(ctx, "u", "warm") // warm expiry counts from release
	p.Wait()                        // the creates' locks are released after they answered
	reaper := NewReaper(p)

	e.clock.Advance(5*time.Minute + time.Second) // active: 10m01s idle; warm: 5m01s since release
	if n, err := reaper.Pass(ctx); err != nil || n != 1 {
		t.Fatalf("first pass reaped %d, %v; want the active one", n, err)
	}
	if e.be.count(e.be.destroys, active.SandboxID) != 1 || e.be.count(e.be.destroys, warm.SandboxID) != 0 {
		t.Fatal("wrong sandbox reaped")
	}
	if _, ok, _ := p.Record(ctx, active.SandboxID); ok {
		t.Fatal("record of the reaped sandbox remains")
	}
	e.clock.Advance(5 * time.Minute)
	if n, _ := reaper.Pass(ctx); n != 1 || e.be.count(e.be.destroys, warm.SandboxID) != 1 {
		t.Fatalf("warm sandbox not reaped %s after release", 10*time.Minute)
	}
	// The thread comes back: a fresh sandbox.
	if _, o, err := p.Acquire(ctx, "u", "active"); err != nil || o != OutcomeCold {
		t.Fatalf("after reaping: %v %v", o, err)
	}
}

func TestInFlightIsNeverReaped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{IdleTimeout: time.Minute})
	serving, other := e.replica(), e.replica()
	r, _, _ := serving.Acquire(ctx, "u", "long")
	r.Begin() // a 20-minute command
	serving.Wait()
	for range 20 {
		e.clock.Advance(time.Minute)
		_ = NewToucher(serving).Flush(ctx) // the serving replica's loop
		for _, p := range []*Pool{other, serving} {
			if n, err := NewReaper(p).Pass(ctx); err != nil || n != 0 {
				t.Fatalf("reaped a sandbox with a request in flight: %d %v", n, err)
			}
		}
	}
	r.End()
	e.clock.Advance(2 * time.Minute)
	if n, _ := NewReaper(other).Pass(ctx); n != 1 {
		t.Fatalf("idle after the request ended, yet not reaped (%d)", n)
	}
}

func TestIdleTimeoutDisabled(t *testing.T) {
	t.Parallel()
	// The same sandbox and clock with a timeout set is reaped: the pass
	// that reaps nothing with the timeout off had something to reap.
	for _, c := range []struct {
		idle time.Duration
		want int
	}{{-1, 0}, {time.Hour, 1}} {
		e := newEnv(t, Config{IdleTimeout: c.idle})
		p := e.replica()
		if _, _, err := p.Acquire(ctx, "u", "forever"); err != nil {
			t.Fatalf("acquire: %v", err)
		}
		p.Wait()
		e.clock.Advance(1000 * time.Hour)
		if n, err := NewReaper(p).Pass(ctx); err != nil || n != c.want {
			t.Fatalf("idle_timeout %s, 1000h idle: reaped %d (%v), want %d", c.idle, n, err, c.want)
		}
	}
}

func TestSoftCapEvictsLeastRecentlyReleased(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxSandboxes: 3})
	p := e.replica()
	ids := map[string]string{}
	for _, th := range []string{"a", "b", "c"} {
		r, _, _ := p.Acquire(ctx, "u", th)
		ids[th] = r.SandboxID
	}
	_ = p.Release(ctx, "u", "b")
	e.clock.Advance(time.Second)
	_ = p.Release(ctx, "u", "a")
	if _, _, err := p.Acquire(ctx, "u", "d"); err != nil {
		t.Fatal(err)
	}
	if e.be.count(e.be.destroys, ids["b"]) != 1 || e.be.count(e.be.destroys, ids["a"]) != 0 {
		t.Fatalf("eviction order: b destroyed %d, a destroyed %d", e.be.count(e.be.destroys, ids["b"]), e.be.count(e.be.destroys, ids["a"]))
	}
	if _, _, err := p.Acquire(ctx, "u", "e"); err != nil {
		t.Fatal(err)
	}
	if e.be.count(e.be.destroys, ids["a"]) != 1 {
		t.Fatal("second eviction did not take a")
	}
	// Nothing warm: soft mode creates beyond the cap (active sandboxes are never killed).
	if _, o, err := p.Acquire(ctx, "u", "f"); err != nil || o != OutcomeCold {
		t.Fatalf("soft cap with nothing warm: %v %v", o, err)
	}
	if n := e.be.liveCount(); n != 4 {
		t.Fatalf("%d live, want c, d, e, f", n)
	}
}

func TestHardCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxSandboxes: 2, HardCap: true})
	p := e.replica()
	_, _, _ = p.Acquire(ctx, "u", "a")
	_, _, _ = p.Acquire(ctx, "u", "b")
	if _, _, err := p.Acquire(ctx, "u", "c"); !errors.Is(err, ErrCapacity) {
		t.Fatalf("hard cap: %v", err)
	}
	if e.be.liveCount() != 2 {
		t.Fatal("created beyond a hard cap")
	}
	// Room appears (a release makes a warm sandbox to evict): it goes through.
	_ = p.Release(ctx, "u", "a")
	if _, _, err := p.Acquire(ctx, "u", "c"); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

func TestThreeReapersDestroyEachExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{IdleTimeout: time.Minute, MaxSandboxes: -1})
	seed := e.replica()
	const n = 200
	sids := make([]string, n)
	for i := range n {
		r, _, err := seed.Acquire(ctx, "u", fmt.Sprintf("t%03d", i))
		if err != nil {
			t.Fatal(err)
		}
		sids[i] = r.SandboxID
		if i%2 == 0 {
			_ = seed.Release(ctx, "u", fmt.Sprintf("t%03d", i))
		}
	}
	seed.Wait()
	e.clock.Advance(2 * time.Minute)
	replicas := []*Pool{e.replica(), e.replica(), e.replica()}
	var wg sync.WaitGroup
	total := make([]int, len(replicas))
	for i, p := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 { // passes overlap
				k, err := NewReaper(p).Pass(ctx)
				if err != nil {
					t.Error(err)
				}
				total[i] += k
			}
		}()
	}
	wg.Wait()
	if sum := total[0] + total[1] + total[2]; sum != n {
		t.Fatalf("replicas reaped %v = %d, want %d", total, sum, n)
	}
	for _, sid := range sids {
		if d := e.be.count(e.be.destroys, sid); d != 1 {
			t.Fatalf("sandbox %s destroyed %d times", sid, d)
		}
	}
	if c, _ := seed.store.Count(ctx); c != (state.Counts{}) {
		t.Fatalf("indexes not empty after reaping: %+v", c)
	}
}

// One pass reaps every expired sandbox of an index, however many pages of
// reapBatch it takes (the passes above overlap, so a pass that stopped
// after its first page would still have its work done by another). One
// bucket, so that the index holds more than a page.
func TestOneReapPassPagesThroughTheIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{IdleTimeout: time.Minute, MaxSandboxes: -1})
	oneBucket := func(d *Deps) { d.Store = statedb.NewStoreBuckets(e.rdb(), "", 1) }
	p := e.replicaWith(oneBucket)
	n := 2*reapBatch + 50
	for i := range n {
		if _, _, err := p.Acquire(ctx, "u", fmt.Sprintf("p%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	p.Wait()
	e.clock.Advance(2 * time.Minute)
	if k, err := NewReaper(e.replicaWith(oneBucket)).Pass(ctx); err != nil || k != n {
		t.Fatalf("one pass reaped %d (%v), want all %d", k, err, n)
	}
	if c, _ := p.store.Count(ctx); c != (state.Counts{}) {
		t.Fatalf("indexes not empty after one pass: %+v", c)
	}
}

func TestRedisFlushLosesNoSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxSandboxes: -1})
	p := e.replica()
	incs := map[string]string{}
	for i := range 5 {
		th := fmt.Sprintf("f%d", i)
		r, _, _ := p.Acquire(ctx, "u", th)
		incs[th] = r.Incarnation
	}
	if err := e.rdb().FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	fresh := e.replica() // a replica with no cache: every acquire goes to Redis
	for th, inc := range incs {
		r, o, err := fresh.Acquire(ctx, "u", th)
		if err != nil || r.Incarnation != inc || o != OutcomeAdopted {
			t.Fatalf("%s after FLUSHALL: %v %v inc %s want %s", th, o, err, r.Incarnation, inc)
		}
	}
	for th := range incs {
		if c := e.be.count(e.be.creates, identity.SandboxID("u", th)); c != 1 {
			t.Fatalf("%s created %d times", th, c)
		}
	}
}

func TestReconcilerAdoptsAndDrops(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxSandboxes: -1, ReconcileGrace: time.Minute})
	p := e.replica()
	kept, _, _ := p.Acquire(ctx, "u", "kept")
	gone, _, _ := p.Acquire(ctx, "u", "gone")
	p.Wait()
	if err := e.rdb().Del(ctx, statedb.NewKeys("", 0).Sandbox(kept.SandboxID)).Err(); err != nil {
		t.Fatal(err)
	}
	e.be.kill(gone.SandboxID)
	rc := NewReconciler(p)

	// Within the grace period a sandbox without a record is left alone (a
	// create may be writing it); the vanished one's record is dropped at once.
	rep, err := rc.Pass(ctx)
	if err != nil || rep.Adopted != 0 || rep.Dropped != 1 {
		t.Fatalf("first pass: %+v %v", rep, err)
	}
	if _, ok, _ := p.Record(ctx, gone.SandboxID); ok {
		t.Fatal("record of a vanished sandbox kept")
	}
	// Dry run: says what it would do, does nothing.
	e.clock.Advance(2 * time.Minute)
	dry := e.cfg
	dry.ReconcileDryRun = true
	q, _ := New(dry, Deps{Store: p.store, Backend: e.be, Clock: e.clock})
	if rep, _ := NewReconciler(q).Pass(ctx); rep.Adopted != 1 {
		t.Fatalf("dry run report: %+v", rep)
	}
	if _, ok, _ := p.Record(ctx, kept.SandboxID); ok {
		t.Fatal("dry run wrote a record")
	}
	rep, err = rc.Pass(ctx)
	if err != nil || rep.Adopted != 1 {
		t.Fatalf("adopt pass: %+v %v", rep, err)
	}
	rec, ok, _ := p.Record(ctx, kept.SandboxID)
	if !ok || rec.State != state.StateWarm || rec.Incarnation != kept.Incarnation || rec.Thread != "kept" {
		t.Fatalf("adopted record: %+v", rec)
	}
	r, o, err := e.replica().Acquire(ctx, "u", "kept")
	if err != nil || o != OutcomeWarm || r.Incarnation != kept.Incarnation {
		t.Fatalf("acquire after adoption: %v %v", o, err)
	}
	if c := e.be.count(e.be.creates, kept.SandboxID); c != 1 {
		t.Fatalf("duplicate create: %d", c)
	}
}

func TestPauseWarm(t *testing.T) {
	t.Parallel()
	for _, pause := range []bool{false, true} {
		e := newEnv(t, Config{PauseWarm: pause})
		p := e.replica()
		r, _, _ := p.Acquire(ctx, "u", "z")
		_ = p.Release(ctx, "u", "z")
		if got := e.be.isPaused(r.SandboxID); got != pause {
			t.Fatalf("pause_warm=%v: paused after release = %v", pause, got)
		}
		r2, o, err := e.replica().Acquire(ctx, "u", "z")
		if err != nil || o != OutcomeWarm || r2.Incarnation != r.Incarnation || e.be.isPaused(r.SandboxID) {
			t.Fatalf("pause_warm=%v: reclaim %v %v paused=%v", pause, o, err, e.be.isPaused(r.SandboxID))
		}
	}
}

// A template's idle timeout replaces the fleet's for its sandboxes:
// shorter, longer or never.
func TestTemplateIdleTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{IdleTimeout: 10 * time.Minute, Templates: []Template{
		{Name: "short", IdleTimeout: time.Minute}, {Name: "long", IdleTimeout: time.Hour}, {Name: "keep", IdleTimeout: -1}}})
	p := e.replica()
	sid := map[string]string{}
	for _, th := range []string{"short", "long", "keep", "fleet"} {
		o := Options{Template: th}
		if th == "fleet" {
			o = Options{}
		}
		if err := p.SetOptions(ctx, "u", th, o); err != nil {
			t.Fatal(err)
		}
		r, _, err := p.Acquire(ctx, "u", th)
		if err != nil {
			t.Fatal(err)
		}
		sid[th] = r.SandboxID
	}
	p.Wait()
	reaper := NewReaper(p)
	for _, step := range []struct {
		advance time.Duration
		reaped  string // "" = none
	}{{2 * time.Minute, "short"}, {5 * time.Minute, ""}, {4 * time.Minute, "fleet"}, {50 * time.Minute, "long"}, {1000 * time.Hour, ""}} {
		e.clock.Advance(step.advance)
		n, err := reaper.Pass(ctx)
		want := 0
		if step.reaped != "" {
			want = 1
		}
		if err != nil || n != want || step.reaped != "" && e.be.count(e.be.destroys, sid[step.reaped]) != 1 {
			t.Fatalf("after %s more: reaped %d (%v), want %q", step.advance, n, err, step.reaped)
		}
	}
	if e.be.count(e.be.destroys, sid["keep"]) != 0 {
		t.Fatal("a template with idle_timeout never was reaped")
	}
	// The fleet's reaper off, a template's timeout still expires its own.
	e2 := newEnv(t, Config{IdleTimeout: -1, Templates: []Template{{Name: "short", IdleTimeout: time.Minute}}})
	p2 := e2.replica()
	for _, th := range []string{"short", "fleet"} {
		if th == "short" {
			_ = p2.SetOptions(ctx, "u", th, Options{Template: th})
		}
		if _, _, err := p2.Acquire(ctx, "u", th); err != nil {
			t.Fatal(err)
		}
	}
	p2.Wait()
	e2.clock.Advance(1000 * time.Hour)
	if n, err := NewReaper(p2).Pass(ctx); err != nil || n != 1 {
		t.Fatalf("fleet never, template 1m, 1000h idle: reaped %d (%v), want the template's only", n, err)
	}
}
