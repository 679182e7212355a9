package pool

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// hotPool is a pool whose Redis is never reached: a cached acquire must not
// need it. It records metrics, as the gateway's does.
func hotPool(tb testing.TB) (*Pool, *Route) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	tb.Cleanup(func() { rdb.Close() })
	p, err := New(Config{Mounts: mountsFor(tb)}, Deps{Store: statedb.NewStore(rdb, ""), Backend: newFakeBackend(tb),
		Clock: realClock{}, Metrics: telemetry.NewMetrics()})
	if err != nil {
		tb.Fatal(err)
	}
	r, err := p.newRoute(state.Record{SandboxID: identity.SandboxID("u", "hot"), User: "u", Thread: "hot",
		Incarnation: "i", URL: "http://127.0.0.1:9"})
	if err != nil {
		tb.Fatal(err)
	}
	r.expires.Store(1 << 62)
	return p, r
}

// unsampledCtx is a request context with tracing on whose trace was not
// sampled (the common case at a low sampling ratio).
func unsampledCtx(tb testing.TB) context.Context {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c, _ := tp.Tracer("test").Start(ctx, "request")
	return c
}

// sampledCtx is a request context inside a sampled trace.
func sampledCtx(tb testing.TB) (context.Context, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c, _ := tp.Tracer("test").Start(ctx, "request")
	return c, rec
}

func TestCachedAcquireDoesNotAllocate(t *testing.T) {
	p, want := hotPool(t)
	thread := "hot"
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"tracing off", ctx}, {"tracing on, trace not sampled", unsampledCtx(t)}} {
		allocs := testing.AllocsPerRun(1000, func() {
			r, o, err := p.Acquire(c.ctx, "u", thread)
			if err != nil || r != want || o != OutcomeHit {
				t.Fatal("cache miss")
			}
			r.Begin()
			r.End()
		})
		if allocs != 0 {
			t.Errorf("%s: cached acquire + touch allocates %.1f times", c.name, allocs)
		}
	}
}

func TestCachedAcquireInASampledTraceHasASpan(t *testing.T) {
	p, want := hotPool(t)
	c, rec := sampledCtx(t)
	if r, o, err := p.Acquire(c, "u", "hot"); err != nil || r != want || o != OutcomeHit {
		t.Fatalf("acquire: %v %v %v", r, o, err)
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != spanAcquire {
		t.Fatalf("spans: %v", spans)
	}
	got := map[string]string{}
	for _, kv := range spans[0].Attributes() {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	if got["outcome"] != "hit" || got["sandbox.id"] != want.SandboxID || got["thread.id"] != "hot" {
		t.Fatalf("attributes: %v", got)
	}
}

func BenchmarkAcquireCached(b *testing.B) {
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"tracing=off", ctx}, {"tracing=unsampled", unsampledCtx(b)}} {
		b.Run(c.name, func(b *testing.B) {
			p, _ := hotPool(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r, _, _ := p.Acquire(c.ctx, "u", "hot")
					r.Begin()
					r.End()
				}
			})
		})
	}
}

func BenchmarkTouchFlush1000Routes(b *testing.B) {
	e := newEnv(b, Config{})
	p := e.replica()
	routes := make([]*Route, 0, 1000)
	for i := range 1000 {
		rec := state.Record{SandboxID: identity.SandboxID("u", strconv.Itoa(i)), User: "u",
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
