package statedb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/internal/state"

	"github.com/redis/go-redis/v9"
)

// The freeze mark. A frozen sandbox keeps its state (active or warm), its
// place and score in its bucket's index (idle expiry still applies) and its
// capacity; its record carries `frozen` (ms). A replica never caches a
// route to a frozen record: Activate refuses it, and the caller thaws the
// sandbox under its lock, then clears the mark (Thaw), then activates.
//
// Why the mark is safe across replicas: every cached route was validated
// by Activate (or written by a create) at most cache_ttl ago, and both
// stamp seen_ms in the record; scriptRecFreeze marks only a record whose
// seen_ms is older than the freeze cutoff, which lies further back than
// cache_ttl (pool.Config.Validate), in the same script that reads it. So
// no replica holds a live route to a sandbox being frozen, and one that
// read the record just before the mark is refused by Activate after it.

// scriptRecFreeze marks an active (or warm) record frozen if it is the
// given incarnation, not frozen yet, and not activated since cutoff.
// ARGV: incarnation, cutoff (ms), now (ms). Returns 1 (marked) or 0.
var scriptRecFreeze = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'state', 'incarnation', 'frozen', 'seen_ms', 'created_ms')
if (st[1] ~= 'active' and st[1] ~= 'warm') or st[2] ~= ARGV[1] or st[3] then return 0 end
local seen = tonumber(st[4] or st[5] or '0') or 0
if seen > tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'frozen', ARGV[3])
return 1
`)

// scriptRecThaw clears the freeze mark of the given incarnation.
// ARGV: incarnation. Returns 1 (cleared) or 0 (no mark, or another
// incarnation).
var scriptRecThaw = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'incarnation') ~= ARGV[1] then return 0 end
return redis.call('HDEL', KEYS[1], 'frozen')
`)

// Freeze marks sid's record frozen (see scriptRecFreeze): false when it
// was activated after cutoff, is being destroyed or pre-started, is
// another incarnation or is frozen already. Hold the sandbox's lock; freeze the processes only after
// a true, and Thaw the mark if that fails.
func (s *Store) Freeze(ctx context.Context, sid, incarnation string, cutoff, now time.Time) (bool, error) {
	n, err := scriptRecFreeze.Run(ctx, s.rdb, []string{s.keys.Sandbox(sid)}, incarnation, ms(cutoff), ms(now)).Int()
	if err != nil {
		return false, fmt.Errorf("mark sandbox frozen: %w", err)
	}
	return n == 1, nil
}

// Thaw clears sid's freeze mark once its processes run again. Hold the
// sandbox's lock.
func (s *Store) Thaw(ctx context.Context, sid, incarnation string) (bool, error) {
	n, err := scriptRecThaw.Run(ctx, s.rdb, []string{s.keys.Sandbox(sid)}, incarnation).Int()
	if err != nil {
		return false, fmt.Errorf("clear freeze mark: %w", err)
	}
	return n == 1, nil
}

// Activity is sid's activity score in its bucket's active index; ok is
// false when it is not there (released, being destroyed).
func (s *Store) Activity(ctx context.Context, sid string) (time.Time, bool, error) {
	v, err := s.rdb.ZScore(ctx, s.keys.Active(s.keys.Bucket(sid)), sid).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read activity: %w", err)
	}
	return time.UnixMilli(int64(v)), true, nil
}

// IdleSince returns, per bucket, up to limit active sandboxes whose
// activity lies in (from[b], to], oldest first: the ones that went idle
// since the freezer's last look at that bucket (a zero from[b] = from the
// start). One round trip per node; the result is in buckets' order.
func (s *Store) IdleSince(ctx context.Context, buckets []int, from map[int]time.Time, to time.Time, limit int64) ([][]state.Idle, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, len(buckets))
	upTo := strconv.FormatInt(ms(to), 10)
	for i, b := range buckets {
		lo := "-inf"
		if f := from[b]; !f.IsZero() {
			lo = "(" + strconv.FormatInt(ms(f), 10)
		}
		cmds[i] = pipe.ZRangeByScoreWithScores(ctx, s.keys.Active(b), &redis.ZRangeBy{Min: lo, Max: upTo, Count: limit})
	}
	if len(buckets) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("list idle sandboxes: %w", err)
		}
	}
	out := make([][]state.Idle, len(buckets))
	for i, c := range cmds {
		for _, z := range c.Val() {
			id, _ := z.Member.(string)
			out[i] = append(out[i], state.Idle{SandboxID: id, Seen: time.UnixMilli(int64(z.Score))})
		}
	}
	return out, nil
}
