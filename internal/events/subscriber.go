package events

import (
	"context"
	"encoding/json"
	"runtime/debug"
	"time"
)

// resubscribeDelay paces a new subscription after Redis dropped the last.
const resubscribeDelay = time.Second

// Run holds this replica's one subscription to the event channel and
// delivers what arrives to the watchers until ctx ends. go-redis
// re-subscribes by itself after a reconnect; a panic in delivery is logged
// with its stack and the loop goes on.
func (b *Bus) Run(ctx context.Context) {
	for ctx.Err() == nil {
		b.subscribeOnce(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(resubscribeDelay):
		}
	}
}

func (b *Bus) subscribeOnce(ctx context.Context) {
	defer func() {
		if r := recover(); r != nil {
			b.log.Error("event delivery panicked", "panic", r, "stack", string(debug.Stack()))
		}
	}()
	sub := b.rdb.Subscribe(ctx, b.cfg.Channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		if ctx.Err() == nil {
			b.log.Warn("event subscription failed", "err", err)
		}
		return
	}
	b.readyOnce.Do(func() { close(b.ready) })
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			var e Event
			if err := json.Unmarshal([]byte(m.Payload), &e); err != nil {
				b.log.Warn("event not understood", "err", err)
				continue
			}
			b.deliver(e)
		}
	}
}

// Ready waits until Run's first subscription is live, so a caller (a
// test, a page that must not miss the next event) knows it will see what
// is published from then on.
func (b *Bus) Ready(ctx context.Context) error {
	select {
	case <-b.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
