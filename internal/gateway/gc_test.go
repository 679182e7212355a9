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
	for i := range 3 {
		runtime.GC()
		deadline := time.Now().Add(5 * time.Second)
		for tr.runs.Load() <= int64(i) {
			if time.Now().After(deadline) {
				t.Fatalf("after %d collections the tuner ran %d times", i+1, tr.runs.Load())
			}
			runtime.Gosched()
		}
	}
	if got := debug.SetGCPercent(100); got != gcMaxPercent || tr.percent.Load() != gcMaxPercent {
		t.Fatalf("GOGC %d (tuner: %d), want %d for a small heap", got, tr.percent.Load(), gcMaxPercent)
	}
}
