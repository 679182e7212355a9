package pool

import (
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/lease"
)

// hotPool is a pool whose Redis is never reached: a cached acquire must not
// need it.
func hotPool(tb testing.TB) (*Pool, *Route) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	tb.Cleanup(func() { rdb.Close() })
	p, err := New(Config{Mounts: mountsFor(tb)}, Deps{Store: lease.NewStore(rdb, ""), Backend: newFakeBackend(tb), Clock: realClock{}})
	if err != nil {
		tb.Fatal(err)
	}
	r, err := p.newRoute(lease.Record{SandboxID: lease.SandboxID("u", "hot"), User: "u", Thread: "hot",
		Incarnation: "i", URL: "http://127.0.0.1:9"})
	if err != nil {
		tb.Fatal(err)
	}
	r.expires.Store(1 << 62)
	return p, r
}

func TestCachedAcquireDoesNotAllocate(t *testing.T) {
	p, want := hotPool(t)
	thread := "hot"
	allocs := testing.AllocsPerRun(1000, func() {
		r, o, err := p.Acquire(ctx, "u", thread)
		if err != nil || r != want || o != OutcomeHit {
			t.Fatal("cache miss")
		}
		r.Begin()
		r.End()
	})
	if allocs != 0 {
		t.Fatalf("cached acquire + touch allocates %.1f times", allocs)
	}
}

func BenchmarkAcquireCached(b *testing.B) {
	p, _ := hotPool(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, _, _ := p.Acquire(ctx, "u", "hot")
			r.Begin()
			r.End()
		}
	})
}

func BenchmarkTouchFlush1000Routes(b *testing.B) {
	e := newEnv(b, Config{})
	p := e.replica()
	routes := make([]*Route, 0, 1000)
	for i := range 1000 {
		rec := lease.Record{SandboxID: lease.SandboxID("u", strconv.Itoa(i)), User: "u",
			Thread: "t", Incarnation: "i", URL: "http://127.0.0.1:9"}
		if err := p.store.PutActive(ctx, rec, e.clock.Now()); err != nil {
			b.Fatal(err)
		}
		r, _ := p.newRoute(rec)
		routes = append(routes, r)
	}
	t := NewToucher(p)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for _, r := range routes {
			r.touched.Store(true)
		}
		if err := t.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
