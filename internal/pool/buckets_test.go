package pool

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestBucketLeasesSplitTheWorkAndMoveOnDeath runs three replicas' lease
// loops on a real redis-server: the buckets are split between them with no
// overlap and no gap, each reaps only its own share (every idle sandbox
// exactly once), and when one replica dies its buckets are taken over once
// its leases expire.
func TestBucketLeasesSplitTheWorkAndMoveOnDeath(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	e := newEnv(t, Config{IdleTimeout: time.Minute, MaxSandboxes: -1, BucketLeaseTTL: ttl})
	reps := make([]*Pool, 3)
	for i := range reps {
		cfg := e.cfg
		cfg.Instance = fmt.Sprintf("r%d", i)
		e.cfg = cfg
		reps[i] = e.replica()
		if err := reps[i].store.Beat(ctx, cfg.Instance, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	n := reps[0].store.Keys().Buckets()
	split := func(live []*Pool) {
		t.Helper()
		// Two rounds: a replica lets go of what another should hold before that one takes it.
		for range 2 {
			for _, p := range live {
				if err := NewBucketLeases(p).Pass(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		seen := map[int]string{}
		for _, p := range live {
			mine := p.held.mine()
			if len(mine) < n/len(live)/2 {
				t.Errorf("%s holds %d of %d buckets: not its share", p.cfg.Instance, len(mine), n)
			}
			for _, b := range mine {
				if other, dup := seen[b]; dup {
					t.Fatalf("bucket %d held by %s and %s", b, other, p.cfg.Instance)
				}
				seen[b] = p.cfg.Instance
			}
		}
		if len(seen) != n {
			t.Fatalf("%d of %d buckets held", len(seen), n)
		}
	}
	split(reps)

	// 60 idle sandboxes over the buckets: reaped once each, by their bucket's replica.
	for i := range 60 {
		if _, _, err := reps[0].Acquire(ctx, "u", fmt.Sprintf("t%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	reps[0].Wait()
	e.clock.Advance(2 * time.Minute)
	var wg sync.WaitGroup
	reaped := make([]int, len(reps))
	for i, p := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if reaped[i], err = NewReaper(p).Pass(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	total := 0
	for i, r := range reaped {
		if r == 0 {
			t.Errorf("%s reaped nothing: the work was not split", reps[i].cfg.Instance)
		}
		total += r
	}
	e.be.mu.Lock()
	destroyed, twice := len(e.be.destroys), 0
	for _, d := range e.be.destroys {
		if d > 1 {
			twice++
		}
	}
	e.be.mu.Unlock()
	if total != 60 || destroyed != 60 || twice != 0 {
		t.Fatalf("reaped %v: %d sandboxes destroyed, %d more than once; want 60 in all, each once", reaped, destroyed, twice)
	}

	// r2 dies: it stops beating and renewing. Once its heartbeat is older
	// than a TTL and its leases have expired, the others hold every bucket.
	e.clock.Advance(2 * ttl)
	for _, p := range reps[:2] {
		if err := p.store.Beat(ctx, p.cfg.Instance, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(ttl + 100*time.Millisecond)
	split(reps[:2])
}
