package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/statedb"
)

var ctx = context.Background()

func TestConcurrentAcquiresCreateOncePerThread(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxSandboxes: -1})
	e.be.delay = 30 * time.Millisecond // a create slow enough for everyone to pile up
	replicas := []*Pool{e.replica(), e.replica(), e.replica()}
	const threads, perThread = 10, 12
	var wg sync.WaitGroup
	errs := make(chan error, threads*perThread)
	for i := range threads * perThread {
		wg.Add(1)
		go func() {
			defer wg.Done()
			thread := fmt.Sprintf("t%d", i%threads)
			r, _, err := replicas[i%3].Acquire(ctx, "u", thread)
			if err == nil && r.Thread != thread {
				err = fmt.Errorf("got route of %s for %s", r.Thread, thread)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range threads {
		sid := identity.SandboxID("u", fmt.Sprintf("t%d", i))
		if n := e.be.count(e.be.creates, sid); n != 1 {
			t.Errorf("thread t%d: %d creates", i, n)
		}
	}
}

func TestCachedAcquireNeedsNoRedis(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := e.replica()
	r1, o1, err := p.Acquire(ctx, "u", "c")
	if err != nil || o1 != OutcomeCold {
		t.Fatalf("first: %v %v", o1, err)
	}
	e.redis.Stop()
	r2, o2, err := p.Acquire(ctx, "u", "c")
	if err != nil || o2 != OutcomeHit || r2 != r1 {
		t.Fatalf("cached acquire with Redis down: %v %v", o2, err)
	}
	// Past the cache TTL the replica must consult Redis again, which is down.
	e.clock.Advance(DefaultCacheTTL + time.Millisecond)
	if _, _, err := p.Acquire(ctx, "u", "c"); !errors.Is(err, ErrState) {
		t.Fatalf("after TTL with Redis down: %v, want ErrState", err)
	}
}

func TestAnotherReplicaReusesTheRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	a, b := e.replica(), e.replica()
	ra, _, err := a.Acquire(ctx, "u", "shared")
	if err != nil {
		t.Fatal(err)
	}
	rb, ob, err := b.Acquire(ctx, "u", "shared")
	if err != nil || ob != OutcomeHit || rb.Incarnation != ra.Incarnation {
		t.Fatalf("replica b: %v %v inc %s vs %s", ob, err, rb.Incarnation, ra.Incarnation)
	}
	if n := e.be.count(e.be.creates, ra.SandboxID); n != 1 {
		t.Fatalf("%d creates", n)
	}
}

func TestReacquireReplacesADeadSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	p := e.replica()
	r1, _, _ := p.Acquire(ctx, "u", "dies")
	e.be.kill(r1.SandboxID)
	r2, o, err := p.Reacquire(ctx, r1)
	if err != nil || o != OutcomeCold || r2.Incarnation == r1.Incarnation {
		t.Fatalf("reacquire: %v %v %s", o, err, r2.Incarnation)
	}
	// Reacquire of a live sandbox keeps it.
	r3, o, err := p.Reacquire(ctx, r2)
	if err != nil || r3.Incarnation != r2.Incarnation || o != OutcomeHit {
		t.Fatalf("reacquire of a live one: %v %v", o, err)
	}
}

func TestTouchFlushRenewsAndDropsStaleRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{IdleTimeout: time.Minute})
	p := e.replica()
	r, _, _ := p.Acquire(ctx, "u", "busy")
	keys := statedb.NewKeys("", 0)
	score := func() float64 { return e.rdb().ZScore(ctx, keys.Active(keys.Bucket(r.SandboxID)), r.SandboxID).Val() }
	before := score()
	e.clock.Advance(30 * time.Second)
	r.Begin()
	r.End()
	if err := NewToucher(p).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if after := score(); after-before != 30_000 {
		t.Fatalf("touch moved the score by %v ms, want 30000", after-before)
	}
	// Nothing served since: the next flush writes nothing.
	e.clock.Advance(10 * time.Second)
	_ = NewToucher(p).Flush(ctx)
	if s := score(); s != before+30_000 {
		t.Fatalf("an idle route was touched: %v", s)
	}
	// Another replica destroyed it: the route goes.
	if _, err := p.store.Forget(ctx, r.SandboxID, ""); err != nil {
		t.Fatal(err)
	}
	r.Begin()
	r.End()
	_ = NewToucher(p).Flush(ctx)
	if got := p.cache.peek(r.SandboxID); got != nil {
		t.Fatal("stale route still cached")
	}
}

func TestCreateFailureGivesCapacityBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxSandboxes: 1, HardCap: true})
	p := e.replica()
	e.be.createErr = errors.New("image missing")
	if _, _, err := p.Acquire(ctx, "u", "x"); !errors.Is(err, ErrCreate) {
		t.Fatalf("want ErrCreate, got %v", err)
	}
	e.be.createErr = nil
	if _, _, err := p.Acquire(ctx, "u", "y"); err != nil {
		t.Fatalf("capacity leaked by the failed create: %v", err)
	}
}

// watchingBackend is the fake backend telling the pool of ended
// incarnations, as the kubernetes backend's Pod informer does.
type watchingBackend struct {
	*fakeBackend
	ended []func(sandboxID, incarnation string)
}

func (w *watchingBackend) OnEnded(fn func(sandboxID, incarnation string)) {
	w.ended = append(w.ended, fn)
}

func TestEndedIncarnationLeavesTheRouteCache(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{CacheTTL: time.Hour})
	wb := &watchingBackend{fakeBackend: e.be}
	p := e.replicaWith(func(d *Deps) { d.Backend = wb })
	if len(wb.ended) != 1 {
		t.Fatalf("the pool registered %d watchers, want 1", len(wb.ended))
	}
	r, _, err := p.Acquire(ctx, "u", "w")
	if err != nil {
		t.Fatal(err)
	}
	wb.ended[0](r.SandboxID, "another-incarnation")
	if _, o, err := p.Acquire(ctx, "u", "w"); err != nil || o != OutcomeHit {
		t.Fatalf("after another incarnation ended: %v %v, want a cache hit", o, err)
	}
	// The incarnation ends (the Pod is deleted): its record in Redis still
	// names it, and nothing has failed yet.
	e.be.mu.Lock()
	delete(e.be.live, r.SandboxID)
	e.be.mu.Unlock()
	wb.ended[0](r.SandboxID, r.Incarnation)
	r2, o, err := p.Acquire(ctx, "u", "w")
	if err != nil || r2 == r || r2.Incarnation == r.Incarnation || o != OutcomeCold {
		t.Fatalf("after the route's incarnation ended: %v %v (incarnation %s, was %s), want a new sandbox", o, err, r2.Incarnation, r.Incarnation)
	}
}
