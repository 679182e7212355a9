package pool

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Work queued with inOrder from many goroutines runs one at a time in the
// order it was queued, and wait returns only after all of it and every run.
func TestBackgroundOrderAndWait(t *testing.T) {
	t.Parallel()
	var b background
	var mu sync.Mutex
	var got []int
	var running, overlapped atomic.Int32
	var ran atomic.Int32
	var queue sync.Mutex // makes "queued before" well defined across goroutines
	next := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				queue.Lock()
				n := next
				next++
				b.inOrder(func() {
					if running.Add(1) > 1 {
						overlapped.Store(1)
					}
					mu.Lock()
					got = append(got, n)
					mu.Unlock()
					running.Add(-1)
				})
				queue.Unlock()
				b.run(func() { ran.Add(1) })
			}
		}()
	}
	wg.Wait()
	b.wait()
	if overlapped.Load() != 0 {
		t.Fatal("two queued functions ran at once")
	}
	if len(got) != 800 || ran.Load() != 800 {
		t.Fatalf("after wait: %d queued and %d run of 800 each", len(got), ran.Load())
	}
	for i, n := range got {
		if n != i {
			t.Fatalf("position %d ran %d: out of order", i, n)
		}
	}
}
