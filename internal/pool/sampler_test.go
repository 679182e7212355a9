package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/backend"
)

// meterBackend is a backend whose sandboxes' CPU time the test sets; a
// meter of an incarnation the test ended fails, as a removed cgroup's
// files do.
type meterBackend struct {
	*fakeBackend
	clock *fakeClock

	mu     sync.Mutex
	cpu    map[string]float64 // by incarnation
	ooms   map[string]int64   // OOM kills, by incarnation
	ended  map[string]bool
	opened int
	closed int
	secret string // of the last meter opened
	// opensFiles: its meters open their files per sample (past a budget).
	opensFiles bool
	samples    map[string]int // by incarnation
}

type testMeter struct {
	b           *meterBackend
	incarnation string
	opensFiles  bool
}

func (t *testMeter) OpensFiles() bool { return t.opensFiles }

func (m *meterBackend) OpenMeter(_ context.Context, info backend.Info) (backend.Meter, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended[info.Incarnation] {
		return nil, errors.New("not running")
	}
	m.opened++
	m.secret = info.Secret
	return &testMeter{b: m, incarnation: info.Incarnation, opensFiles: m.opensFiles}, nil
}

func (t *testMeter) Sample(context.Context) (backend.Stats, error) {
	t.b.mu.Lock()
	defer t.b.mu.Unlock()
	if t.b.ended[t.incarnation] {
		return backend.Stats{}, errors.New("cgroup gone")
	}
	if t.b.samples != nil {
		t.b.samples[t.incarnation]++
	}
	return backend.Stats{CPUSeconds: t.b.cpu[t.incarnation], MemoryBytes: 200 << 20, PIDs: 2,
		OOMKills: t.b.ooms[t.incarnation], At: t.b.clock.Now()}, nil
}

func (t *testMeter) Close() {
	t.b.mu.Lock()
	t.b.closed++
	t.b.mu.Unlock()
}

func (m *meterBackend) setCPU(inc string, v float64) {
	m.mu.Lock()
	m.cpu[inc] = v
	m.mu.Unlock()
}

// TestSampler: CPU % comes from the delta of two samples over their time
// apart; the ring keeps the last 60; a watcher gets each sample; a
// sandbox this replica stops serving is dropped (meter closed, watch
// ended), a new incarnation starts a new history, a failing meter is
// reopened, and a sandbox only asked for is sampled for metricsAskedFor.
func TestSampler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newFakeClock()
	be := &meterBackend{fakeBackend: newFakeBackend(t), clock: clock, cpu: map[string]float64{}, ended: map[string]bool{}}
	c := newCache()
	s := newSampler(samplerParams{interval: time.Second, backendName: "fake", backend: be, cache: c, clock: clock,
		log: slog.New(slog.DiscardHandler)})
	r := &Route{SandboxID: "sb-a", User: "u", Thread: "ta", Incarnation: "i1", key: []string{"s3cret"}}
	c.put(r, clock.Now().Add(time.Hour))
	info := backend.Info{SandboxID: "sb-a", User: "u", Thread: "ta", Incarnation: "i1"}

	pass := func() {
		t.Helper()
		if err := s.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pass()
	if be.secret != "s3cret" {
		t.Errorf("meter opened with secret %q, want the route's (a sandbox server's stats need it)", be.secret)
	}
	m := metricsOf(t, s, info)
	if m.Latest == nil || m.Latest.CPUPercent != nil || len(m.History) != 1 {
		t.Fatalf("after one pass: %+v, want one sample without cpu_percent", m)
	}
	samples, stop, err := s.Watch(ctx, info)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	clock.Advance(2 * time.Second)
	be.setCPU("i1", 1.5) // 1.5 s of CPU in 2 s: 75 %
	pass()
	m = metricsOf(t, s, info)
	if m.Latest == nil || m.Latest.CPUPercent == nil || *m.Latest.CPUPercent != 75 || len(m.History) != 2 {
		t.Fatalf("after two passes: %+v, want cpu_percent 75 and two samples", m)
	}
	if got := <-samples; got.CPUPercent == nil || *got.CPUPercent != 75 {
		t.Errorf("watched sample = %+v, want cpu_percent 75", got)
	}
	if u := s.Usage(); len(u) != 1 || u[0].CPUCores != 0.75 || u[0].MemoryBytes != 200<<20 {
		t.Errorf("Usage = %+v", u)
	}
	for i := 0; i < 70; i++ {
		clock.Advance(time.Second)
		pass()
	}
	m = metricsOf(t, s, info)
	if len(m.History) != metricsHistory || !m.History[0].At.Before(m.History[metricsHistory-1].At) ||
		m.History[metricsHistory-1].At != m.Latest.At {
		t.Errorf("history of %d samples, want the last %d oldest first ending at latest", len(m.History), metricsHistory)
	}

	// The incarnation ends: its meter fails, and is reopened by a later pass.
	be.mu.Lock()
	be.ended["i1"] = true
	be.mu.Unlock()
	pass()
	be.mu.Lock()
	be.ended["i1"] = false
	opened := be.opened
	be.mu.Unlock()
	clock.Advance(time.Second)
	pass()
	be.mu.Lock()
	reopened := be.opened - opened
	be.mu.Unlock()
	if reopened != 1 {
		t.Errorf("a failed meter was reopened %d times, want 1", reopened)
	}

	// A new incarnation: a new history.
	c.put(&Route{SandboxID: "sb-a", User: "u", Thread: "ta", Incarnation: "i2"}, clock.Now().Add(time.Hour))
	pass()
	if _, open := <-samples; open {
		// a buffered sample may come first; the channel must close after
		for range samples {
		}
	}
	m = metricsOf(t, s, backend.Info{SandboxID: "sb-a", Thread: "ta", Incarnation: "i2"})
	if len(m.History) != 1 {
		t.Errorf("new incarnation's history = %d samples, want 1", len(m.History))
	}

	// No longer served here: kept while asked for, then dropped; one whose
	// sample fails (destroyed) at once.
	c.drop("sb-a", nil)
	clock.Advance(metricsAskedFor / 2)
	pass()
	if len(s.Usage()) != 1 {
		t.Fatal("a sandbox asked for a moment ago was dropped")
	}
	clock.Advance(metricsAskedFor)
	pass()
	if n := len(s.Usage()); n != 0 {
		t.Errorf("%d sandboxes sampled after their route went and no one asked, want 0", n)
	}
	metricsOf(t, s, backend.Info{SandboxID: "sb-a", Thread: "ta", Incarnation: "i2"})
	be.mu.Lock()
	be.ended["i2"] = true
	be.mu.Unlock()
	pass()
	if n := len(s.Usage()); n != 0 {
		t.Errorf("%d sandboxes sampled after the asked-for one's meter failed, want 0", n)
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	if be.closed != be.opened {
		t.Errorf("meters opened %d, closed %d", be.opened, be.closed)
	}
}

func metricsOf(t *testing.T, s *Sampler, info backend.Info) api.SandboxMetrics {
	t.Helper()
	m, err := s.Metrics(context.Background(), info)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSamplerWithoutMeasure: a backend that cannot measure (kubernetes
// without Sandgate's server) is ErrNotSupported, not a panic.
func TestSamplerWithoutMeasure(t *testing.T) {
	t.Parallel()
	s := newSampler(samplerParams{interval: time.Second, backendName: "fake", backend: newFakeBackend(t), cache: newCache(),
		clock: newFakeClock(), log: slog.New(slog.DiscardHandler)})
	info := backend.Info{SandboxID: "sb", Incarnation: "i"}
	if _, err := s.Metrics(context.Background(), info); !errors.Is(err, backend.ErrNotSupported) {
		t.Errorf("Metrics = %v, want ErrNotSupported", err)
	}
	if _, _, err := s.Watch(context.Background(), info); !errors.Is(err, backend.ErrNotSupported) {
		t.Errorf("Watch = %v, want ErrNotSupported", err)
	}
}

// BenchmarkSamplerPass is the sampler's own cost per sandbox per pass
// (the route walk, the ring, CPU %), with a meter that reads nothing; the
// cgroup reads are jail's BenchmarkReadUsageV2. docs/OBSERVABILITY.md adds
// the two up for 1,000 sandboxes.
func BenchmarkSamplerPass(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			clock := newFakeClock()
			be := &meterBackend{fakeBackend: newFakeBackend(b), clock: clock, cpu: map[string]float64{}, ended: map[string]bool{}}
			c := newCache()
			s := newSampler(samplerParams{interval: time.Second, backendName: "fake", backend: be, cache: c, clock: clock,
				log: slog.New(slog.DiscardHandler)})
			for i := range n {
				c.put(&Route{SandboxID: fmt.Sprintf("sb-%d", i), Thread: "t", Incarnation: "i"}, clock.Now().Add(time.Hour))
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				clock.Advance(time.Second)
				if err := s.Pass(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sandbox")
		})
	}
}

// TestMetricsTopN: no top-N series by default (0), up to 100 (a series
// each); a negative count or one past 100 is refused.
func TestMetricsTopN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n     int
		valid bool
	}{{0, true}, {3, true}, {100, true}, {-1, false}, {101, false}} {
		c := Config{MetricsTopN: tc.n, Mounts: backend.MountConfig{DataDir: "/d"}}
		if err := c.Validate(); (err == nil) != tc.valid {
			t.Errorf("metrics_top_n %d: Validate %v; want valid %v", tc.n, err, tc.valid)
		}
	}
}

// A meter that opens its files per sample (past the process backend's
// budget of held files) samples every metricsSlowEvery passes, its
// sandboxes spread over the passes, and says so in its interval; a held
// meter samples every pass.
func TestSamplerPacesMetersThatOpenFiles(t *testing.T) {
	t.Parallel()
	for _, opens := range []bool{false, true} {
		t.Run(fmt.Sprint("opens files ", opens), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newFakeClock()
			be := &meterBackend{fakeBackend: newFakeBackend(t), clock: clock, cpu: map[string]float64{}, ended: map[string]bool{},
				opensFiles: opens, samples: map[string]int{}}
			c := newCache()
			s := newSampler(samplerParams{interval: time.Second, backendName: "fake", backend: be, cache: c, clock: clock,
				log: slog.New(slog.DiscardHandler)})
			const n = 2 * metricsSlowEvery
			for i := range n {
				c.put(&Route{SandboxID: fmt.Sprint("sb-", i), User: "u", Thread: fmt.Sprint("t", i), Incarnation: fmt.Sprint("i", i)},
					clock.Now().Add(time.Hour))
			}
			const passes = 1 + 3*metricsSlowEvery
			perPass := make([]int, 0, passes)
			for range passes {
				be.mu.Lock()
				before := 0
				for _, k := range be.samples {
					before += k
				}
				be.mu.Unlock()
				if err := s.Pass(ctx); err != nil {
					t.Fatal(err)
				}
				clock.Advance(time.Second)
				be.mu.Lock()
				after := 0
				for _, k := range be.samples {
					after += k
				}
				be.mu.Unlock()
				perPass = append(perPass, after-before)
			}
			// The first pass opens every meter and samples each once.
			want, every := n, time.Second
			if opens {
				want, every = n/metricsSlowEvery, metricsSlowEvery*time.Second
			}
			for i, got := range perPass[1:] {
				if got != want {
					t.Fatalf("pass %d sampled %d sandboxes, want %d (passes: %v)", i+2, got, want, perPass)
				}
			}
			for inc, k := range be.samples {
				if wantK := 1 + (passes-1)*want/n; k != wantK {
					t.Errorf("%s sampled %d times in %d passes, want %d", inc, k, passes, wantK)
				}
			}
			m := metricsOf(t, s, backend.Info{SandboxID: "sb-0", User: "u", Thread: "t0", Incarnation: "i0"})
			if m.IntervalSeconds != every.Seconds() {
				t.Errorf("interval_seconds %v, want %v", m.IntervalSeconds, every.Seconds())
			}
		})
	}
}
