package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptPutPrewarm records a just-started (or adopted) pre-started sandbox
// in the prewarm index and gives back the refill's capacity reservation,
// unless a record exists (the reconciler racing a refill).
// KEYS: sbx, prewarm, creating. ARGV: sid, now, field/value pairs...
// Returns 1 (written) or 0.
var scriptPutPrewarm = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], 'state', 'prewarm', unpack(fields))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
`)

// scriptTakePrewarm hands the pre-started sandbox pw to the new thread's
// sandbox id sid: it leaves the prewarm index and its record is deleted
// (returned to the caller), and its capacity unit becomes sid's
// reservation, owned by the thread's user, in one step. Of the replicas
// racing for pw, one gets the record, the others nil. If the taker dies
// before recording sid, pw runs without a record: the reconciler adopts it
// back into the prewarm index after its grace period, and sid's
// reservation expires.
// KEYS: sbx(pw), prewarm, creating, owners. ARGV: pw, sid, deadline, user.
var scriptTakePrewarm = redis.NewScript(`
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return nil end
local rec = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
redis.call('HSET', KEYS[4], ARGV[2], ARGV[4])
return rec
`)

// PutPrewarm writes rec, a sandbox no thread has claimed, into the prewarm
// index unless a record exists; it reports whether it wrote.
func (s *Store) PutPrewarm(ctx context.Context, rec Record, now time.Time) (bool, error) {
	sid := rec.SandboxID
	args := append([]any{sid, ms(now)}, rec.fields()...)
	keys := []string{s.keys.Sandbox(sid), s.keys.Prewarm(), s.keys.Creating()}
	n, err := scriptPutPrewarm.Run(ctx, s.rdb, keys, args...).Int()
	if err != nil {
		return false, fmt.Errorf("write prewarm record: %w", err)
	}
	return n == 1, nil
}

// TakePrewarm moves the pre-started sandbox pw to (sid, user): see
// scriptTakePrewarm. ok is false when another replica took it first.
func (s *Store) TakePrewarm(ctx context.Context, pw, sid, user string, deadline time.Time) (Record, bool, error) {
	keys := []string{s.keys.Sandbox(pw), s.keys.Prewarm(), s.keys.Creating(), s.keys.Owners()}
	res, err := scriptTakePrewarm.Run(ctx, s.rdb, keys, pw, sid, ms(deadline), user).Slice()
	if errors.Is(err, redis.Nil) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("take prewarm sandbox: %w", err)
	}
	rec, ok := recordFromPairs(pw, res)
	return rec, ok, nil
}

// PrewarmRecords returns the pre-started sandboxes' records, oldest first.
func (s *Store) PrewarmRecords(ctx context.Context) ([]Record, error) {
	ids, err := s.rdb.ZRange(ctx, s.keys.Prewarm(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("list prewarm sandboxes: %w", err)
	}
	return s.records(ctx, ids)
}
