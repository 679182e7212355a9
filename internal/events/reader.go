package events

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// readBlock is how long one XREAD waits for a new event. An event
	// ends the wait at once; the bound only paces an idle loop and lets
	// Run notice that ctx ended (go-redis does not cut a blocked read).
	readBlock = time.Second
	// rereadDelay paces a new read after Redis failed the last.
	rereadDelay = time.Second
)

// Run is this replica's one reader of the fleet's stream: a blocking
// XREAD from the last id it delivered, whatever the number of followers,
// until ctx ends. A panic in delivery is logged with its stack and the
// loop goes on from where it was.
func (b *Bus) Run(ctx context.Context) {
	for ctx.Err() == nil {
		b.readOnce(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(rereadDelay):
		}
	}
}

func (b *Bus) readOnce(ctx context.Context) {
	defer func() {
		if r := recover(); r != nil {
			b.log.Error("event delivery panicked", "panic", r, "stack", string(debug.Stack()))
		}
	}()
	cur := b.cursor.Load()
	if cur == nil {
		// Start at the stream's end: followers replay the past themselves.
		last, err := b.rdb.XRevRangeN(ctx, b.cfg.Stream, "+", "-", 1).Result()
		if err != nil {
			b.warn(ctx, err)
			return
		}
		cur = &Position{}
		if len(last) == 1 {
			p, _ := After(last[0].ID)
			cur = &p
		}
		b.cursor.Store(cur)
		b.readyOnce.Do(func() { close(b.ready) })
	}
	for ctx.Err() == nil {
		res, err := b.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{b.cfg.Stream, cur.String()},
			Count: readPage, Block: readBlock}).Result()
		if errors.Is(err, redis.Nil) {
			continue // nothing new within readBlock
		}
		if err != nil {
			b.warn(ctx, err)
			return
		}
		for _, s := range res {
			for _, m := range s.Messages {
				p, err := After(m.ID)
				if err != nil {
					continue
				}
				cur = &p
				if e, ok := b.decode(m); ok {
					b.deliver(e)
				}
			}
		}
		b.cursor.Store(cur)
	}
}

func (b *Bus) warn(ctx context.Context, err error) {
	if ctx.Err() == nil {
		b.log.Warn("event stream read failed", "err", err)
	}
}

// Now is the position of the last event Run delivered: following from it
// gets what is published from now on. It waits for Run to start.
func (b *Bus) Now(ctx context.Context) (Position, error) {
	if err := b.Ready(ctx); err != nil {
		return Position{}, err
	}
	return *b.cursor.Load(), nil
}

// Ready waits until Run knows where the stream ends, so a caller (a test,
// a follower from now) knows it will see what is published from then on.
func (b *Bus) Ready(ctx context.Context) error {
	select {
	case <-b.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
