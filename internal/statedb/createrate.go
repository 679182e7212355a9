package statedb

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptCreateRate is one user's fleet-wide create rate as GCRA (the
// generic cell rate algorithm: a token bucket kept as one number). The key
// holds the theoretical arrival time (ms) at which the user's bucket is
// full again; each create pushes it one interval later, and a create is
// refused while it lies more than the burst window ahead of now. The key
// expires when the bucket is full again, so an idle user costs nothing.
//
// KEYS: the user's create-rate key.
// ARGV: now (ms), interval (ms: per / n), burst window (ms: interval * (n-1)).
// Returns 0 (allowed, counted) or the ms to wait before one would be.
var scriptCreateRate = redis.NewScript(`
local now, interval, window = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or 0)
if tat < now then tat = now end
local wait = tat - window - now
if wait > 0 then return wait end
tat = tat + interval
redis.call('SET', KEYS[1], tat, 'PX', tat - now)
return 0
`)

// CreateRate bounds how many sandboxes are created for one user across the
// whole fleet: n per per, in bursts of up to n (pool.CreateLimiter). One
// Redis round trip per real create; cache hits and reclaims never ask.
type CreateRate struct {
	store    *Store
	interval time.Duration
	window   time.Duration
	now      func() time.Time
}

// NewCreateRate returns the limiter of n creates per per for each user;
// now is the clock (nil: time.Now).
func NewCreateRate(s *Store, n int, per time.Duration, now func() time.Time) (*CreateRate, error) {
	if n <= 0 || per <= 0 {
		return nil, fmt.Errorf("create rate: %d per %s is not a rate", n, per)
	}
	if now == nil {
		now = time.Now
	}
	interval := per / time.Duration(n)
	return &CreateRate{store: s, interval: interval, window: interval * time.Duration(n-1), now: now}, nil
}

// AllowCreate takes one create from user's budget, or says how long until
// one is available.
func (c *CreateRate) AllowCreate(ctx context.Context, user string) (time.Duration, bool, error) {
	wait, err := scriptCreateRate.Run(ctx, c.store.rdb, []string{c.store.keys.CreateRate(user)},
		ms(c.now()), c.interval.Milliseconds(), c.window.Milliseconds()).Int64()
	if err != nil {
		return 0, false, fmt.Errorf("create rate of %s: %w", user, err)
	}
	return time.Duration(wait) * time.Millisecond, wait == 0, nil
}
