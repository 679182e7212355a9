package webhook

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults of the zero Config.
const (
	DefaultMaxAge      = 24 * time.Hour
	DefaultTimeout     = 10 * time.Second
	DefaultBackoff     = time.Second
	DefaultMaxBackoff  = 30 * time.Second
	DefaultClaimIdle   = time.Minute
	DefaultDeadLetters = 1000
	DefaultConcurrency = 16
	// DefaultRefresh is how often a replica reloads the endpoints the
	// admin API registered.
	DefaultRefresh = 2 * time.Second
)

// Keys are the Redis keys, all in the fleet's hash tag slot.
type Keys struct {
	// Stream is the fleet's events stream (events.Config.Stream).
	Stream string
	// Endpoints is a HASH id -> endpoint JSON (those the admin API made).
	Endpoints string
	// Stats is a HASH "{id}|delivered" (failed, dead) -> count.
	Stats string
	// DeadPrefix + id is an endpoint's STREAM of dead letters.
	DeadPrefix string
}

// Config configures webhook delivery. The zero value of each field is its
// documented default; the gateway fills Keys, Consumer and Log.
type Config struct {
	Keys Keys `yaml:"-"`
	// Endpoints are the operator's configured endpoints (not deletable
	// through the API).
	Endpoints []Endpoint
	// MaxAge is how long after the event an endpoint's delivery is
	// retried before it is dead-lettered. 0 = 24h.
	MaxAge time.Duration
	// Timeout bounds one attempt, from dial to the response's end. 0 = 10s.
	Timeout time.Duration
	// Backoff is the first retry's delay, doubled per attempt (with
	// jitter) up to MaxBackoff. 0 = 1s, 30s.
	Backoff, MaxBackoff time.Duration
	// ClaimIdle is how long an event a replica took may go untouched
	// before another replica takes it over. It must exceed MaxBackoff +
	// Timeout, the longest a live replica leaves it untouched. 0 = 1m.
	ClaimIdle time.Duration
	// DeadLetters bounds each endpoint's dead letters (oldest dropped).
	// 0 = 1000.
	DeadLetters int
	// Concurrency bounds each endpoint's deliveries in flight per
	// replica. 0 = 16.
	Concurrency int
	// Refresh is how often registered endpoints are reloaded. 0 = 2s.
	Refresh time.Duration
	// Consumer names this replica in the consumer groups (the instance).
	Consumer string       `yaml:"-"`
	Log      *slog.Logger `yaml:"-"`
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.MaxAge < 0 || c.Timeout < 0 || c.Backoff < 0 || c.MaxBackoff < 0 || c.ClaimIdle < 0 ||
		c.DeadLetters < 0 || c.Concurrency < 0 || c.Refresh < 0 {
		return errors.New("webhook: durations and counts must not be negative")
	}
	d := c.withDefaults()
	if d.ClaimIdle <= d.MaxBackoff+d.Timeout {
		return fmt.Errorf("webhook: claim idle %s must exceed max backoff %s + timeout %s, or a live replica's retries would be taken over",
			d.ClaimIdle, d.MaxBackoff, d.Timeout)
	}
	seen := map[string]bool{}
	for _, e := range c.Endpoints {
		if err := e.validate(); err != nil {
			return err
		}
		if seen[e.ID] {
			return fmt.Errorf("webhook: endpoint %s is configured twice", e.ID)
		}
		seen[e.ID] = true
	}
	return nil
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.MaxAge, DefaultMaxAge)
	def(&c.Timeout, DefaultTimeout)
	def(&c.Backoff, DefaultBackoff)
	def(&c.MaxBackoff, DefaultMaxBackoff)
	def(&c.ClaimIdle, DefaultClaimIdle)
	def(&c.Refresh, DefaultRefresh)
	if c.DeadLetters == 0 {
		c.DeadLetters = DefaultDeadLetters
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Consumer == "" {
		c.Consumer = "default"
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}
