package events

import (
	"context"
	"sync"
	"time"
)

// Throttle defaults.
const (
	// DefaultThrottleEvery is how often one key (a sandbox) may publish:
	// a loop of refused connects makes one event per window, not one per
	// connect.
	DefaultThrottleEvery = 10 * time.Second
	// throttleKeys bounds the keys remembered: past it, the ones whose
	// window ended are forgotten (they would publish at once anyway).
	throttleKeys = 4096
)

// Publisher appends an event (Bus is one).
type Publisher interface {
	Publish(ctx context.Context, e Event)
}

// Throttle passes at most one event per key and window to its Publisher;
// an event held back is counted in the next one that passes (Event.Count),
// so the stream says how many occurred, not each. Offer never waits for
// Redis: an event that passes is published by a goroutine of its own (at
// most one per key and window, so their number is bounded).
type Throttle struct {
	pub   Publisher
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*throttled
}

type throttled struct {
	until time.Time // the window of the last event passed
	held  int64     // events held back since
}

// NewThrottle returns a throttle publishing to pub; every 0 =
// DefaultThrottleEvery.
func NewThrottle(pub Publisher, every time.Duration) *Throttle {
	if every <= 0 {
		every = DefaultThrottleEvery
	}
	return &Throttle{pub: pub, every: every, now: time.Now, keys: map[string]*throttled{}}
}

// Offer publishes e unless key published within the window, counting it
// then.
func (t *Throttle) Offer(ctx context.Context, key string, e Event) {
	now := t.now()
	t.mu.Lock()
	k := t.keys[key]
	if k == nil {
		if len(t.keys) >= throttleKeys {
			t.forget(now)
		}
		k = &throttled{}
		t.keys[key] = k
	}
	if now.Before(k.until) {
		k.held++
		t.mu.Unlock()
		return
	}
	e.Count = 1 + k.held
	k.until, k.held = now.Add(t.every), 0
	t.mu.Unlock()
	if e.Time.IsZero() {
		e.Time = now
	}
	go t.pub.Publish(context.WithoutCancel(ctx), e)
}

// forget drops the keys whose window ended and that hold nothing back.
func (t *Throttle) forget(now time.Time) {
	for key, k := range t.keys {
		if !now.Before(k.until) && k.held == 0 {
			delete(t.keys, key)
		}
	}
}
