package events

import (
	"context"
	"time"
)

// watcher is one follower's share of Run's deliveries.
type watcher struct {
	ch    chan Event
	match func(Event) bool
	// lag closes when ch overflowed: the follower missed some and must
	// catch up from the stream.
	lag    chan struct{}
	lagged bool
}

// Follow returns the events after from that match (nil: all), in stream
// order: first those the stream holds, then the ones any replica publishes
// while ctx lasts; the channel closes when ctx ends. Nothing is skipped: a
// follower that falls more than Config.Buffer events behind Run reads what
// it missed from the stream, so a slow reader slows only itself.
func (b *Bus) Follow(ctx context.Context, from Position, match func(Event) bool) <-chan Event {
	out := make(chan Event)
	go func() {
		defer close(out)
		// Before Run knows where the stream ends, an event appended after
		// the replay could fall before Run's start and reach no one.
		if b.Ready(ctx) != nil {
			return
		}
		for ctx.Err() == nil {
			next, ok := b.followOnce(ctx, from, match, out)
			from = next
			if ok {
				continue // lagged: catch up from the stream
			}
			select {
			case <-ctx.Done():
			case <-time.After(rereadDelay):
			}
		}
	}()
	return out
}

// followOnce watches Run's deliveries, then replays the stream after from
// (what was delivered meanwhile comes twice; its id drops the copy), then
// passes the live ones on. It returns the position of the last event sent
// and whether to go on at once (the watcher lagged) or after a pause (a
// Redis error); ctx's end returns too.
func (b *Bus) followOnce(ctx context.Context, from Position, match func(Event) bool, out chan<- Event) (Position, bool) {
	w := b.addWatcher(match)
	defer b.removeWatcher(w)
	send := func(e Event) bool {
		p, err := After(e.ID)
		if err != nil || !from.before(p) {
			return true // seen already
		}
		select {
		case out <- e:
			from = p
			return true
		case <-ctx.Done():
			return false
		}
	}
	alive := true
	err := b.scan(ctx, from, func(e Event) bool {
		if match != nil && !match(e) {
			return true
		}
		alive = send(e)
		return alive
	})
	if !alive {
		return from, false
	}
	if err != nil {
		if ctx.Err() == nil {
			b.log.Warn("event replay failed", "after", from.String(), "err", err)
		}
		return from, false
	}
	for {
		select {
		case <-ctx.Done():
			return from, false
		case <-w.lag:
			// Drain what did arrive in order, then catch up after it.
			for {
				select {
				case e := <-w.ch:
					if !send(e) {
						return from, false
					}
				default:
					return from, true
				}
			}
		case e := <-w.ch:
			if !send(e) {
				return from, false
			}
		}
	}
}

func (b *Bus) addWatcher(match func(Event) bool) *watcher {
	w := &watcher{ch: make(chan Event, b.cfg.Buffer), match: match, lag: make(chan struct{})}
	b.mu.Lock()
	b.watch[w] = struct{}{}
	b.mu.Unlock()
	return w
}

func (b *Bus) removeWatcher(w *watcher) {
	b.mu.Lock()
	delete(b.watch, w)
	b.mu.Unlock()
}

// deliver hands e to every matching watcher without waiting: one whose
// buffer is full is told to catch up from the stream and gets nothing
// more from Run.
func (b *Bus) deliver(e Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for w := range b.watch {
		if w.lagged || w.match != nil && !w.match(e) {
			continue
		}
		select {
		case w.ch <- e:
		default:
			w.lagged = true
			close(w.lag)
			b.lagged.Add(1)
		}
	}
}
