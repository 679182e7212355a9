package events

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config configures a Bus. The zero value of each field is its documented
// default.
type Config struct {
	// Channel is the Redis Pub/Sub channel events travel on (required).
	Channel string
	// RecentKey is the Redis LIST of the latest events, newest first
	// (required).
	RecentKey string
	// Keep is how many events RecentKey holds. 0 = 200.
	Keep int
	// Replica names this instance in the events it publishes.
	Replica string
	// Buffer is how many events one watcher may lag before it misses
	// some (a slow browser must not slow a create). 0 = 64.
	Buffer int
	Log    *slog.Logger
}

// Defaults.
const (
	DefaultKeep   = 200
	DefaultBuffer = 64
	// publishTimeout bounds a publish: an event is worth less than the
	// create or destroy that reports it.
	publishTimeout = time.Second
)

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	if c.Channel == "" || c.RecentKey == "" {
		return fmt.Errorf("events: channel and recent key are required")
	}
	if c.Keep < 0 || c.Buffer < 0 {
		return fmt.Errorf("events: keep and buffer must not be negative")
	}
	return nil
}

// Bus publishes events to Redis and fans the ones every replica publishes
// out to this replica's watchers through one subscription (Run).
type Bus struct {
	rdb     redis.UniversalClient
	cfg     Config
	log     *slog.Logger
	mu      sync.Mutex
	watch   map[*watcher]struct{}
	dropped atomic.Int64
	// ready closes once Run has subscribed.
	ready     chan struct{}
	readyOnce sync.Once
}

type watcher struct {
	ch    chan Event
	match func(Event) bool
}

// New returns a bus; Run delivers to its watchers.
func New(rdb redis.UniversalClient, cfg Config) (*Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Keep == 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.Buffer == 0 {
		cfg.Buffer = DefaultBuffer
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	return &Bus{rdb: rdb, cfg: cfg, log: log, watch: map[*watcher]struct{}{}, ready: make(chan struct{})}, nil
}

// Publish sends e to every replica and keeps it among the recent ones. It
// fills Time and Replica when unset. A failure is logged, not returned: no
// lifecycle step waits for, or fails because of, its event.
func (b *Bus) Publish(ctx context.Context, e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if e.Replica == "" {
		e.Replica = b.cfg.Replica
	}
	data, err := json.Marshal(e)
	if err != nil {
		b.log.Warn("event not published", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	// LPUSH+LTRIM keep the list bounded whatever interleaves (no condition,
	// so no Lua); PUBLISH reaches the replicas subscribed right now.
	_, err = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, b.cfg.RecentKey, data)
		p.LTrim(ctx, b.cfg.RecentKey, 0, int64(b.cfg.Keep-1))
		p.Publish(ctx, b.cfg.Channel, data)
		return nil
	})
	if err != nil {
		b.log.Warn("event not published", "type", e.Type, "sandbox_id", e.SandboxID, "err", err)
	}
}

// Recent returns up to n of the latest events (all replicas), newest first.
func (b *Bus) Recent(ctx context.Context, n int) ([]Event, error) {
	if n <= 0 || n > b.cfg.Keep {
		n = b.cfg.Keep
	}
	raw, err := b.rdb.LRange(ctx, b.cfg.RecentKey, 0, int64(n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("recent events: %w", err)
	}
	out := make([]Event, 0, len(raw))
	for _, s := range raw {
		var e Event
		if json.Unmarshal([]byte(s), &e) == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// Watch returns the events matching match (nil: all) published from now
// on, by any replica, while Run runs. stop ends the watch and closes the
// channel. A watcher that lags more than Config.Buffer events misses the
// newer ones (Dropped counts them) rather than slowing anyone.
func (b *Bus) Watch(match func(Event) bool) (events <-chan Event, stop func()) {
	w := &watcher{ch: make(chan Event, b.cfg.Buffer), match: match}
	b.mu.Lock()
	b.watch[w] = struct{}{}
	b.mu.Unlock()
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.watch, w)
			b.mu.Unlock()
			close(w.ch)
		})
	}
}

// Dropped counts events a lagging watcher missed.
func (b *Bus) Dropped() int64 { return b.dropped.Load() }

func (b *Bus) deliver(e Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for w := range b.watch {
		if w.match != nil && !w.match(e) {
			continue
		}
		select {
		case w.ch <- e:
		default:
			b.dropped.Add(1)
		}
	}
}
