package pool

import "sync"

// background runs what an acquire leaves to do after it answered: releasing
// its locks and publishing its events. Each is a Redis round trip that a
// new thread's first request would otherwise wait for (three of the dozen
// on a claim of a pre-started sandbox). Events keep the order they were
// given in: one goroutine at a time publishes them, started when the first
// one is queued and gone when the queue is empty.
type background struct {
	wg       sync.WaitGroup
	mu       sync.Mutex
	queue    []func()
	draining bool
}

// run runs fn on its own goroutine.
func (b *background) run(fn func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		fn()
	}()
}

// inOrder runs fn after every fn given to inOrder before it.
func (b *background) inOrder(fn func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue = append(b.queue, fn)
	if b.draining {
		return
	}
	b.draining = true
	b.run(b.drain)
}

func (b *background) drain() {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.draining = false
			b.queue = nil
			b.mu.Unlock()
			return
		}
		fn := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.mu.Unlock()
		fn()
	}
}

// wait returns once everything given to run and inOrder is done.
func (b *background) wait() { b.wg.Wait() }
