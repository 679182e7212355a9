package gateway

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestGCPercentFollowsTheLiveHeap(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 400}, {1 << 20, 400}, {16 << 20, 400}, {32 << 20, 200}, {64 << 20, 100}, {1 << 30, 100},
	} {
		if got := gcPercent(c.live); got != c.want {
			t.Errorf("gcPercent(%d MiB) = %d, want %d", c.live>>20, got, c.want)
		}
	}
}

// The tuner runs after every collection (re-arming itself) and sets GOGC
// from the live heap: a test binary's heap is small, so 400.
func TestGCTunerRetunesAfterEachCollection(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tr := &gcTuner{}
	tr.sample = append(tr.sample, newLiveSample())
	tr.percent.Store(100)
	debug.SetGCPercent(100)
	tr.arm()
	// Each run arms the next on a new object, which survives the cycle it
	// was allocated in if that one had begun: collect until the tuner runs.
	deadline := time.Now().Add(10 * time.Second)
	for tr.runs.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the tuner ran %d times, want 3", tr.runs.Load())
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if got := debug.SetGCPercent(100); got != gcMaxPercent || tr.percent.Load() != gcMaxPercent {
		t.Fatalf("GOGC %d (tuner: %d), want %d for a small heap", got, tr.percent.Load(), gcMaxPercent)
	}
}
