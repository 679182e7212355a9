package events

import (
	"context"
	"time"
)

// Read is scan collected: what the stream holds after from, that match
// (nil: all), oldest first, up to limit (0: all). Tests read with it; the
// gateway's readers follow (Follow) instead.
func (b *Bus) Read(ctx context.Context, from Position, match func(Event) bool, limit int) ([]Event, error) {
	var out []Event
	err := b.scan(ctx, from, func(e Event) bool {
		if match == nil || match(e) {
			out = append(out, e)
		}
		return limit == 0 || len(out) < limit
	})
	return out, err
}

// SetClock makes the throttle read the time from now.
func (t *Throttle) SetClock(now func() time.Time) { t.now = now }
