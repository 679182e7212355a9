package pool

import (
	"context"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/statedb"
)

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

// after holds what a provision leaves for once its caller is answered: the
// last step of writing its record (statedb.Store.RecordActive), which must
// land before the sandbox's lock is released.
type after struct {
	mu  sync.Mutex
	fns []func(context.Context) error
}

type afterKey struct{}

func withAfterAnswer(ctx context.Context) (context.Context, *after) {
	a := &after{}
	return context.WithValue(ctx, afterKey{}, a), a
}

// afterAnswer leaves fn to the provision of ctx, or runs it now outside one.
func afterAnswer(ctx context.Context, fn func(context.Context) error) error {
	a, _ := ctx.Value(afterKey{}).(*after)
	if a == nil {
		return fn(ctx)
	}
	a.mu.Lock()
	a.fns = append(a.fns, fn)
	a.mu.Unlock()
	return nil
}

// unlockLater releases h after the caller answered: the record it guarded
// is written, so nobody needs to wait for the release but a destroy or a
// create of the same sandbox, which waits for the lock.
func (b *background) unlockLater(l locks, h *statedb.Held) { b.run(func() { l.unlock(h) }) }

// unlockAfter runs what the provision left, then releases its lock, after
// the caller answered.
func (b *background) unlockAfter(l locks, h *statedb.Held, a *after) {
	b.run(func() {
		a.mu.Lock()
		fns := a.fns
		a.mu.Unlock()
		for _, fn := range fns {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := fn(ctx); err != nil {
				l.log.Warn("finish recording a sandbox (the reconciler repairs it)", "err", err)
			}
			cancel()
		}
		l.unlock(h)
	})
}
