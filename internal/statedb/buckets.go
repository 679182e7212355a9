package statedb

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptLease takes, renews or lets go of one bucket's lease: the right to
// reap and reconcile the bucket, so that the fleet's replicas split that
// work. A lease only divides work: exactly-once stays the record's and the
// sandbox lock's job, so two holders for a moment cost nothing but effort.
// KEYS: the bucket's lease. ARGV: token, ttl (ms), op (hold|drop).
// Returns 1 when the caller holds it after the call.
var scriptLease = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if ARGV[3] == 'drop' then
  if cur == ARGV[1] then redis.call('DEL', KEYS[1]) end
  return 0
end
if cur and cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// HoldBuckets takes or renews the leases of want for ttl and lets go of
// those of drop that token holds, one round trip per node; it returns the
// buckets of want now held.
func (s *Store) HoldBuckets(ctx context.Context, token string, want, drop []int, ttl time.Duration) ([]int, error) {
	calls := make([]*call, 0, len(want)+len(drop))
	for _, b := range want {
		calls = append(calls, &call{script: scriptLease, keys: []string{s.keys.Lease(b)}, args: []any{token, ttl.Milliseconds(), "hold"}})
	}
	for _, b := range drop {
		calls = append(calls, &call{script: scriptLease, keys: []string{s.keys.Lease(b)}, args: []any{token, ttl.Milliseconds(), "drop"}})
	}
	if err := s.batch(ctx, calls, nil); err != nil {
		return nil, fmt.Errorf("bucket leases: %w", err)
	}
	var held []int
	for i, b := range want {
		if n, _ := calls[i].cmd.Int(); n == 1 {
			held = append(held, b)
		}
	}
	return held, nil
}
