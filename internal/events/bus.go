package events

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config configures a Bus. The zero value of each field is its documented
// default.
type Config struct {
	// Stream is the fleet's Redis Stream of events (required).
	Stream string
	// Retention is how long an event stays readable (the config's
	// events_retention). 0 = 7 days.
	Retention time.Duration
	// MaxLen bounds the stream's length whatever the retention: the
	// oldest go first. 0 = 100000.
	MaxLen int64
	// Replica names this instance in the events it publishes.
	Replica string
	// Buffer is how many events one follower may lag behind Run before it
	// catches up from the stream instead (a slow browser must not slow
	// Run, nor a create). 0 = 64.
	Buffer int
	Log    *slog.Logger
}

// Defaults.
const (
	DefaultRetention = 7 * 24 * time.Hour
	DefaultMaxLen    = 100_000
	DefaultBuffer    = 64
	// DefaultRecent is how many of the latest events Recent returns.
	DefaultRecent = 200
	// publishTimeout bounds a publish: an event is worth less than the
	// create or destroy that reports it.
	publishTimeout = time.Second
	// readPage is how many entries one XRANGE or XREAD returns.
	readPage = 512
	// field is the one field of a stream entry: the event's JSON.
	field = "e"
)

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	if c.Stream == "" {
		return fmt.Errorf("events: the stream key is required")
	}
	if c.Retention < 0 || c.MaxLen < 0 || c.Buffer < 0 {
		return fmt.Errorf("events: retention, max length and buffer must not be negative")
	}
	return nil
}

// Bus appends events to the fleet's stream and fans what every replica
// appends out to this replica's followers through one blocking reader
// (Run).
type Bus struct {
	rdb       redis.UniversalClient
	cfg       Config
	log       *slog.Logger
	mu        sync.Mutex
	watch     map[*watcher]struct{}
	lagged    atomic.Int64
	cursor    atomic.Pointer[Position] // the last id Run delivered
	ready     chan struct{}            // closes once Run knows where the stream ends
	readyOnce sync.Once
}

// New returns a bus; Run delivers to its followers.
func New(rdb redis.UniversalClient, cfg Config) (*Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.MaxLen == 0 {
		cfg.MaxLen = DefaultMaxLen
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

// Publish appends e to the fleet's stream. It fills Time and Replica when
// unset; Redis gives the id. A failure is logged, not returned: no
// lifecycle step waits for, or fails because of, its event.
func (b *Bus) Publish(ctx context.Context, e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if e.Replica == "" {
		e.Replica = b.cfg.Replica
	}
	e.ID = ""
	data, err := json.Marshal(e)
	if err != nil {
		b.log.Warn("event not published", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	// XADD can trim by one rule only: MAXLEN ~ bounds the length (Redis
	// trims whole nodes, cheaply, never below the bound), then XTRIM MINID
	// drops exactly what is older than the retention, about one entry per
	// append. Unconditional, so no Lua; one key, so one Cluster slot.
	oldest := time.Now().Add(-b.cfg.Retention).UnixMilli()
	_, err = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: b.cfg.Stream, MaxLen: b.cfg.MaxLen, Approx: true, Values: []string{field, string(data)}})
		p.XTrimMinID(ctx, b.cfg.Stream, strconv.FormatInt(oldest, 10))
		return nil
	})
	if err != nil {
		b.log.Warn("event not published", "type", e.Type, "sandbox_id", e.SandboxID, "err", err)
	}
}

// scan passes the events after from to fn, oldest first, one page of the
// stream at a time (a replay of days holds one page in memory, not all),
// until fn returns false or the stream ends.
func (b *Bus) scan(ctx context.Context, from Position, fn func(Event) bool) error {
	for {
		msgs, err := b.rdb.XRangeN(ctx, b.cfg.Stream, "("+from.String(), "+", readPage).Result()
		if err != nil {
			return fmt.Errorf("read events: %w", err)
		}
		for _, m := range msgs {
			if e, ok := b.decode(m); ok && !fn(e) {
				return nil
			}
		}
		if len(msgs) < readPage {
			return nil
		}
		from, _ = After(msgs[len(msgs)-1].ID)
	}
}

// Recent returns up to n of the latest events (all replicas), newest
// first; n <= 0 = DefaultRecent.
func (b *Bus) Recent(ctx context.Context, n int) ([]Event, error) {
	if n <= 0 {
		n = DefaultRecent
	}
	msgs, err := b.rdb.XRevRangeN(ctx, b.cfg.Stream, "+", "-", int64(n)).Result()
	if err != nil {
		return nil, fmt.Errorf("recent events: %w", err)
	}
	out := make([]Event, 0, len(msgs))
	for _, m := range msgs {
		if e, ok := b.decode(m); ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// decode reads one stream entry; one that is not an event (written by
// hand, or by a newer version) is skipped, and logged.
func (b *Bus) decode(m redis.XMessage) (Event, bool) {
	var e Event
	s, _ := m.Values[field].(string)
	if err := json.Unmarshal([]byte(s), &e); err != nil {
		b.log.Warn("event not understood", "id", m.ID, "err", err)
		return Event{}, false
	}
	e.ID = m.ID
	return e, true
}

// Lagged counts the times a follower fell more than Config.Buffer events
// behind and caught up from the stream.
func (b *Bus) Lagged() int64 { return b.lagged.Load() }
