package pool

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
)

// layerBackend is a meterBackend whose sandboxes have a writable layer.
type layerBackend struct {
	*meterBackend
	layer  int64
	layers int // LayerBytes calls
}

func (l *layerBackend) LayerBytes(context.Context, backend.Info) (int64, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.layers++
	return l.layer, true, nil
}

// diskMeters are SamplerMeters the test sets; ThreadDisk blocks while
// hold is open, and fails while fail is set.
type diskMeters struct {
	mu      sync.Mutex
	data    int64
	walks   int
	maxAge  time.Duration
	fail    bool
	hold    chan struct{}
	traffic [2]int64
}

func (d *diskMeters) meters() SamplerMeters {
	return SamplerMeters{
		ThreadDisk: func(ctx context.Context, user, thread string, maxAge time.Duration) (int64, error) {
			d.mu.Lock()
			d.walks++
			d.maxAge = maxAge
			hold, fail, n := d.hold, d.fail, d.data
			d.mu.Unlock()
			if hold != nil {
				<-hold
			}
			if fail {
				return 0, errors.New("walk failed")
			}
			return n, nil
		},
		Egress: func(sid string) (int64, int64, bool) {
			d.mu.Lock()
			defer d.mu.Unlock()
			return d.traffic[0], d.traffic[1], sid == "sb-d"
		},
	}
}

func (d *diskMeters) set(f func(d *diskMeters)) {
	d.mu.Lock()
	f(d)
	d.mu.Unlock()
}

func (d *diskMeters) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.walks
}

// TestSamplerDiskAndEgress: each sample carries the egress counters as
// they are then, and the disk figures of the last disk pass, which runs in
// the background once every metricsDiskEvery intervals (at once for a new
// sandbox), one at a time; a failed walk keeps the last figure.
func TestSamplerDiskAndEgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newFakeClock()
	be := &layerBackend{meterBackend: &meterBackend{fakeBackend: newFakeBackend(t), clock: clock, cpu: map[string]float64{},
		ended: map[string]bool{}}, layer: 3 << 20}
	dm := &diskMeters{data: 20 << 20, traffic: [2]int64{100, 5000}}
	c := newCache()
	s := newSampler(samplerParams{interval: time.Second, backendName: "fake", backend: be, cache: c, clock: clock,
		meters: dm.meters(), log: slog.New(slog.DiscardHandler)})
	c.put(&Route{SandboxID: "sb-d", User: "u", Thread: "td", Incarnation: "i1"}, clock.Now().Add(time.Hour))
	pass := func() {
		t.Helper()
		clock.Advance(time.Second)
		if err := s.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	settle := func() { // the disk pass Pass started, if any, ends
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); s.disking.Load(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the disk pass did not end")
			}
		}
	}
	latest := func() (data, layer, sent, received int64) {
		t.Helper()
		l, ok := s.Latest("sb-d")
		if !ok {
			t.Fatal("no latest sample")
		}
		return l.DataBytes, l.LayerBytes, l.EgressSentBytes, l.EgressReceivedBytes
	}

	// The first walk is held until the first sample is read: a walk that
	// ends before the sample is taken (it runs in the background) would
	// otherwise be in it.
	first := make(chan struct{})
	dm.set(func(d *diskMeters) { d.hold = first })
	pass()
	if data, layer, sent, received := latest(); data != 0 || layer != 0 || sent != 100 || received != 5000 {
		t.Fatalf("first sample: data %d layer %d sent %d received %d; want the egress counters and no disk yet", data, layer, sent, received)
	}
	dm.set(func(d *diskMeters) { d.hold = nil })
	close(first)
	settle()
	if dm.count() != 1 || dm.maxAge != metricsDiskEvery*time.Second/2 {
		t.Fatalf("a new sandbox: %d walks (max age %s), want one at once", dm.count(), dm.maxAge)
	}
	dm.set(func(d *diskMeters) { d.traffic = [2]int64{200, 9000} })
	pass()
	if data, layer, sent, received := latest(); data != 20<<20 || layer != 3<<20 || sent != 200 || received != 9000 {
		t.Fatalf("second sample: data %d layer %d sent %d received %d", data, layer, sent, received)
	}
	if u := s.Usage(); len(u) != 1 || u[0].DataBytes != 20<<20 || u[0].LayerBytes != 3<<20 || u[0].EgressReceivedBytes != 9000 {
		t.Errorf("Usage = %+v, want the disk and egress figures", u)
	}
	// Not again until metricsDiskEvery intervals after the last.
	for range metricsDiskEvery - 2 {
		pass()
		settle()
	}
	if dm.count() != 1 || be.layers != 1 {
		t.Fatalf("%d walks and %d layer measures within %d intervals, want 1", dm.count(), be.layers, metricsDiskEvery)
	}
	dm.set(func(d *diskMeters) { d.data = 40 << 20; d.hold = make(chan struct{}) })
	pass() // due: a walk starts, and hangs
	for deadline := time.Now().Add(5 * time.Second); dm.count() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d walks %d intervals after the first, want 2", dm.count(), metricsDiskEvery)
		}
	}
	for range 2 * metricsDiskEvery {
		pass()
	}
	if dm.count() != 2 {
		t.Fatalf("%d walks while one hung, want no second at once", dm.count())
	}
	close(dm.hold)
	settle()
	pass()
	if data, _, _, _ := latest(); data != 40<<20 {
		t.Fatalf("data %d after the slow walk, want its 40 MiB", data)
	}
	dm.set(func(d *diskMeters) { d.hold, d.fail = nil, true })
	for range metricsDiskEvery {
		pass()
		settle()
	}
	pass()
	if data, _, _, _ := latest(); data != 40<<20 || dm.count() < 3 {
		t.Fatalf("data %d after a failed walk (%d walks), want the last figure kept", data, dm.count())
	}
}
