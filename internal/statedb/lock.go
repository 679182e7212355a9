package statedb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/state"

	"github.com/bsm/redislock"
)

// DefaultLockTTL bounds how long a crashed replica can block a sandbox: its
// lock expires this long after the last refresh.
const DefaultLockTTL = 15 * time.Second

// Locker hands out the per-sandbox lock held while creating or destroying.
type Locker struct {
	client *redislock.Client
	keys   Keys
	ttl    time.Duration
}

// NewLocker returns a Locker for the store's keys; ttl 0 = DefaultLockTTL.
func NewLocker(s *Store, ttl time.Duration) *Locker {
	if ttl <= 0 {
		ttl = DefaultLockTTL
	}
	return &Locker{client: redislock.New(s.rdb), keys: s.keys, ttl: ttl}
}

// Held is an obtained lock, refreshed in the background until released.
type Held struct {
	lock    *redislock.Lock
	stop    chan struct{}
	lost    chan struct{}
	done    chan struct{}
	release sync.Once
}

// Obtain takes sid's lock, retrying with backoff for up to wait (0 = one try).
func (l *Locker) Obtain(ctx context.Context, sid string, wait time.Duration) (*Held, error) {
	retry := redislock.NoRetry()
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
		retry = redislock.ExponentialBackoff(8*time.Millisecond, 200*time.Millisecond)
	}
	lock, err := l.client.Obtain(ctx, l.keys.Lock(sid), l.ttl, &redislock.Options{RetryStrategy: retry})
	switch {
	case errors.Is(err, redislock.ErrNotObtained), wait > 0 && errors.Is(err, context.DeadlineExceeded):
		return nil, state.ErrLocked
	case err != nil:
		return nil, fmt.Errorf("obtain lock: %w", err)
	}
	h := &Held{lock: lock, stop: make(chan struct{}), lost: make(chan struct{}), done: make(chan struct{})}
	go h.refresh(l.ttl)
	return h, nil
}

// refresh extends the TTL every third of it; if the lock is gone (Redis
// lost it, or it expired during a stall) Lost is closed so the holder stops.
func (h *Held) refresh(ttl time.Duration) {
	defer close(h.done)
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), ttl/3)
			err := h.lock.Refresh(ctx, ttl, nil)
			cancel()
			if errors.Is(err, redislock.ErrNotObtained) {
				close(h.lost)
				return
			}
		}
	}
}

// Lost is closed when the lock could not be kept.
func (h *Held) Lost() <-chan struct{} { return h.lost }

// Release stops refreshing and deletes the lock if still ours.
func (h *Held) Release(ctx context.Context) error {
	var err error
	h.release.Do(func() {
		close(h.stop)
		<-h.done
		if e := h.lock.Release(ctx); e != nil && !errors.Is(e, redislock.ErrLockNotHeld) {
			err = fmt.Errorf("release lock: %w", e)
		}
	})
	return err
}
