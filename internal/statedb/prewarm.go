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

// scriptTakePrewarm hands the pre-started sandbox pw to the new thread's
// sandbox id sid in the fleet's slot: pw leaves the pre-started index with
// its fingerprint, its fingerprint's claim count (KEYS[8]) goes up by one
// (none without a fingerprint: an earlier version indexed it), and its
// capacity unit becomes sid's reservation, in one step. Of the replicas
// racing for pw, one gets 1 (and counts), the others nil.
// KEYS: fleetKeys. ARGV: pw, sid, deadline, user.
var scriptTakePrewarm = redis.NewScript(`
if redis.call('ZREM', KEYS[4], ARGV[1]) == 0 then return nil end
local fp = redis.call('HGET', KEYS[7], ARGV[1])
if fp then
  redis.call('HDEL', KEYS[7], ARGV[1])
  redis.call('HINCRBY', KEYS[8], fp, 1)
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[3], ARGV[2], ARGV[4]) end
return 1
`)

// PutPrewarm writes rec, a sandbox no thread has claimed, into the prewarm
// index with its fingerprint (rec.Prewarm) unless a record exists, and gives back the refill's reservation; it
// reports whether it wrote. Steps: (1) registered in its bucket; (2) record
// written if absent; (3) the fleet indexes it and releases the reservation.
// A crash after (1) leaves a registry entry Repair drops; after (2), a
// pre-started record out of the index, which Repair indexes.
func (s *Store) PutPrewarm(ctx context.Context, rec state.Record, now time.Time) (bool, error) {
	sid := rec.SandboxID
	if wrote, err := s.putAbsent(ctx, rec, state.StatePrewarm, now); err != nil || !wrote {
		return false, err
	}
	if err := s.step("put_prewarm", 2); err != nil {
		return false, err
	}
	err := scriptFleetCommit.Run(ctx, s.rdb, s.keys.fleetKeys(), sid, "", "", "", "", "", strconv.FormatInt(ms(now), 10), rec.Prewarm).Err()
	if err != nil {
		return false, fmt.Errorf("index prewarm record: %w", err)
	}
	return true, nil
}

// TakePrewarm moves the pre-started sandbox pw to (sid, user) and returns
// pw's record, deleted. ok is false when another replica took it first.
// Steps: (1) the fleet moves pw's unit to sid's reservation; (2) pw's record
// deleted; (3) pw out of its bucket. A crash after (1) leaves pw's record
// out of the index (Repair puts it back; sid's reservation expires); after
// (2), a registry entry Repair drops. If the taker dies before recording
// sid, pw runs without a record: the reconciler adopts it back.
func (s *Store) TakePrewarm(ctx context.Context, pw, sid, user string, deadline time.Time) (state.Record, bool, error) {
	rec, forget, ok, err := s.TakePrewarmRecord(ctx, pw, sid, user, deadline)
	if err != nil || !ok {
		return state.Record{}, false, err
	}
	return rec, true, forget(ctx)
}

// TakePrewarmRecord runs TakePrewarm's steps (1) and (2) and returns step
// (3), which only tidies pw's bucket, for the caller to run once it has
// answered.
func (s *Store) TakePrewarmRecord(ctx context.Context, pw, sid, user string, deadline time.Time) (rec state.Record, forget func(context.Context) error, ok bool, err error) {
	err = scriptTakePrewarm.Run(ctx, s.rdb, s.keys.fleetKeys(), pw, sid, ms(deadline), user).Err()
	if errors.Is(err, redis.Nil) {
		return state.Record{}, nil, false, nil
	}
	if err != nil {
		return state.Record{}, nil, false, fmt.Errorf("take prewarm sandbox: %w", err)
	}
	if err := s.step("take_prewarm", 1); err != nil {
		return state.Record{}, nil, false, err
	}
	if rec, ok, err = s.deleteRecord(ctx, pw, "", state.StatePrewarm); err != nil || !ok {
		return state.Record{}, nil, false, err
	}
	if err := s.step("take_prewarm", 2); err != nil {
		return state.Record{}, nil, false, err
	}
	return rec, func(ctx context.Context) error {
		if err := s.move(ctx, pw, "drop", time.Time{}, ""); err != nil {
			return fmt.Errorf("take prewarm sandbox: %w", err)
		}
		return nil
	}, true, nil
}

// PrewarmRecords returns the pre-started sandboxes' records, oldest first.
func (s *Store) PrewarmRecords(ctx context.Context) ([]state.Record, error) {
	ids, err := s.rdb.ZRange(ctx, s.keys.Prewarm(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("list prewarm sandboxes: %w", err)
	}
	return s.records(ctx, ids)
}

// PrewarmClaims returns how many pre-started sandboxes of each fingerprint
// threads have taken since the deployment began: cumulative counts, whose
// deltas between two reads are the demand.
func (s *Store) PrewarmClaims(ctx context.Context) (map[string]int64, error) {
	h, err := s.rdb.HGetAll(ctx, s.keys.Claims()).Result()
	if err != nil {
		return nil, fmt.Errorf("read prewarm claims: %w", err)
	}
	out := make(map[string]int64, len(h))
	for fp, v := range h {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("read prewarm claims: fingerprint %q: %w", fp, err)
		}
		out[fp] = n
	}
	return out, nil
}

// PrewarmCounts returns how many unclaimed pre-started sandboxes each
// fingerprint has now. Those indexed without one (by an earlier version,
// until the reconciler copies their record's in) count under "", so the
// counts add up to Counts.Prewarm. One read of both keys, in one slot.
func (s *Store) PrewarmCounts(ctx context.Context) (map[string]int64, error) {
	var ids *redis.StringSliceCmd
	var fps *redis.MapStringStringCmd
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		ids = p.ZRange(ctx, s.keys.Prewarm(), 0, -1)
		fps = p.HGetAll(ctx, s.keys.PrewarmFP())
		return nil
	}); err != nil {
		return nil, fmt.Errorf("count prewarm sandboxes: %w", err)
	}
	out := map[string]int64{}
	for _, sid := range ids.Val() {
		out[fps.Val()[sid]]++
	}
	return out, nil
}
