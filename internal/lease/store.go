// Package lease keeps the fleet-wide sandbox state in Redis: one record per
// sandbox, the active and warm indexes, the capacity reservations and the
// per-sandbox provisioning lock. Every conditional write is one Lua script,
// so replicas never interleave a read and a write.
package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store reads and writes sandbox records. It has no clock of its own: every
// time comes from the caller, so tests inject one.
type Store struct {
	rdb  redis.UniversalClient
	keys Keys
}

// NewStore returns a Store over rdb with the given key prefix.
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, keys: NewKeys(prefix)}
}

// Keys returns the key set in use.
func (s *Store) Keys() Keys { return s.keys }

// Client returns the Redis client (for the lock and health checks).
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis ping: %w", err)
	}
	return nil
}

// Get returns the record of sid; ok is false when there is none.
func (s *Store) Get(ctx context.Context, sid string) (Record, bool, error) {
	h, err := s.rdb.HGetAll(ctx, s.keys.Sandbox(sid)).Result()
	if err != nil {
		return Record{}, false, fmt.Errorf("read record: %w", err)
	}
	rec, ok := recordFromHash(sid, h)
	return rec, ok, nil
}

// PutActive writes rec as active with activity now. Hold the sandbox's lock.
func (s *Store) PutActive(ctx context.Context, rec Record, now time.Time) error {
	sid := rec.SandboxID
	args := append([]any{sid, ms(now), rec.Incarnation}, rec.fields()...)
	keys := []string{s.keys.Sandbox(sid), s.keys.Active(), s.keys.Warm(), s.keys.Creating(), s.keys.Caps(), s.keys.Owners()}
	if err := scriptPutActive.Run(ctx, s.rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("write active record: %w", err)
	}
	return nil
}

// PutWarm writes rec into the warm pool unless a record exists; it reports
// whether it wrote.
func (s *Store) PutWarm(ctx context.Context, rec Record, now time.Time) (bool, error) {
	sid := rec.SandboxID
	args := append([]any{sid, ms(now)}, rec.fields()...)
	keys := []string{s.keys.Sandbox(sid), s.keys.Active(), s.keys.Warm(), s.keys.Owners()}
	n, err := scriptPutWarm.Run(ctx, s.rdb, keys, args...).Int()
	if err != nil {
		return false, fmt.Errorf("write warm record: %w", err)
	}
	return n == 1, nil
}

// Activate moves the warm sandbox sid back to active if it is still the
// incarnation the caller checked.
func (s *Store) Activate(ctx context.Context, sid, incarnation string, now time.Time) (bool, error) {
	n, err := scriptActivate.Run(ctx, s.rdb, s.recordKeys(sid), sid, incarnation, ms(now)).Int()
	if err != nil {
		return false, fmt.Errorf("activate warm sandbox: %w", err)
	}
	return n == 1, nil
}

// ErrIdentity: a record's user and thread are not the caller's.
var ErrIdentity = errors.New("sandbox record belongs to another user or thread")

// Release parks sid, the sandbox of (user, thread), in the warm pool; false
// when there is no record, ErrIdentity when the record is not (user, thread)'s.
func (s *Store) Release(ctx context.Context, sid, user, thread string, now time.Time) (bool, error) {
	n, err := scriptRelease.Run(ctx, s.rdb, s.recordKeys(sid), sid, ms(now), user, thread).Int()
	if err != nil {
		return false, fmt.Errorf("release sandbox: %w", err)
	}
	if n < 0 {
		return false, ErrIdentity
	}
	return n == 1, nil
}

// Claim marks sid as being destroyed and returns its record, or ok=false
// when another replica claimed it first or the incarnation ("" = any) differs.
func (s *Store) Claim(ctx context.Context, sid, incarnation string) (Record, bool, error) {
	keys := append(s.recordKeys(sid), s.keys.Sandbox(sid), s.keys.Prewarm())
	return s.claim(ctx, sid, keys, incarnation, "")
}

// ClaimExpired claims sid only if its score in index (Active, Warm or
// Prewarm) is at or below cutoff: the reaper's exactly-once gate.
func (s *Store) ClaimExpired(ctx context.Context, sid, index string, cutoff time.Time) (Record, bool, error) {
	keys := append(s.recordKeys(sid), index, s.keys.Prewarm())
	return s.claim(ctx, sid, keys, "", strconv.FormatInt(ms(cutoff), 10))
}

func (s *Store) claim(ctx context.Context, sid string, keys []string, incarnation, cutoff string) (Record, bool, error) {
	res, err := scriptClaim.Run(ctx, s.rdb, keys, sid, incarnation, cutoff).Slice()
	if errors.Is(err, redis.Nil) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("claim sandbox: %w", err)
	}
	rec, ok := recordFromPairs(sid, res)
	return rec, ok, nil
}

// Forget deletes sid's record if it still names incarnation ("" = any).
func (s *Store) Forget(ctx context.Context, sid, incarnation string) (bool, error) {
	keys := append(s.recordKeys(sid), s.keys.Caps(), s.keys.Owners(), s.keys.Prewarm())
	n, err := scriptForget.Run(ctx, s.rdb, keys, sid, incarnation).Int()
	if err != nil {
		return false, fmt.Errorf("forget sandbox: %w", err)
	}
	return n == 1, nil
}

// TouchEntry names one sandbox incarnation a replica served.
type TouchEntry struct {
	SandboxID   string
	Incarnation string
}

// Touch refreshes the activity of entries in one round trip and returns the
// indexes of entries that are no longer active with that incarnation.
func (s *Store) Touch(ctx context.Context, entries []TouchEntry, now time.Time) ([]int, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(entries)+1)
	args := make([]any, 0, 2*len(entries)+1)
	keys = append(keys, s.keys.Active())
	args = append(args, ms(now))
	for _, e := range entries {
		keys = append(keys, s.keys.Sandbox(e.SandboxID))
		args = append(args, e.SandboxID, e.Incarnation)
	}
	raw, err := scriptTouch.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("touch sandboxes: %w", err)
	}
	stale := make([]int, len(raw))
	for i, v := range raw {
		stale[i] = int(v) - 1
	}
	return stale, nil
}

// Expired returns up to limit sandboxes of index scored at or below cutoff,
// oldest first. Cost is O(log n + limit): the reaper never scans the pool.
func (s *Store) Expired(ctx context.Context, index string, cutoff time.Time, limit int64) ([]string, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, index, &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(ms(cutoff), 10), Count: limit,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("list expired: %w", err)
	}
	return ids, nil
}

// Counts are the fleet-wide pool sizes.
type Counts struct{ Active, Warm, Creating, Prewarm int64 }

// Count returns the pool sizes in one round trip.
func (s *Store) Count(ctx context.Context) (Counts, error) {
	pipe := s.rdb.Pipeline()
	a := pipe.ZCard(ctx, s.keys.Active())
	w := pipe.ZCard(ctx, s.keys.Warm())
	c := pipe.ZCard(ctx, s.keys.Creating())
	pw := pipe.ZCard(ctx, s.keys.Prewarm())
	if _, err := pipe.Exec(ctx); err != nil {
		return Counts{}, fmt.Errorf("count pool: %w", err)
	}
	return Counts{Active: a.Val(), Warm: w.Val(), Creating: c.Val(), Prewarm: pw.Val()}, nil
}

// All returns every record, whatever its state, by scanning the record keys:
// O(pool), for the reconciler and listings, never for a request.
func (s *Store) All(ctx context.Context) ([]Record, error) {
	var (
		mu  sync.Mutex
		ids []string
	)
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, s.keys.Sandbox("*"), 512).Iterator()
		for iter.Next(ctx) {
			if sid := s.keys.SandboxIDFromKey(iter.Val()); sid != "" {
				mu.Lock()
				ids = append(ids, sid)
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		// SCAN is per node on a Cluster; the hash tag puts the keys on one, but which one moves.
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, s.rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("scan records: %w", err)
	}
	return s.records(ctx, ids)
}

// List returns every record in the active and warm indexes (threads'
// sandboxes: the prewarm pool's are PrewarmRecords).
func (s *Store) List(ctx context.Context) ([]Record, error) {
	var ids []string
	for _, idx := range []string{s.keys.Active(), s.keys.Warm()} {
		part, err := s.rdb.ZRange(ctx, idx, 0, -1).Result()
		if err != nil {
			return nil, fmt.Errorf("list pool: %w", err)
		}
		ids = append(ids, part...)
	}
	return s.records(ctx, ids)
}

func (s *Store) records(ctx context.Context, ids []string) ([]Record, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, sid := range ids {
		cmds[i] = pipe.HGetAll(ctx, s.keys.Sandbox(sid))
	}
	if len(ids) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("read pool records: %w", err)
		}
	}
	out := make([]Record, 0, len(ids))
	for i, sid := range ids {
		if rec, ok := recordFromHash(sid, cmds[i].Val()); ok {
			out = append(out, rec)
		}
	}
	return out, nil
}

func (s *Store) recordKeys(sid string) []string {
	return []string{s.keys.Sandbox(sid), s.keys.Active(), s.keys.Warm()}
}

func ms(t time.Time) int64 { return t.UnixMilli() }
