package statedb

import (
	"context"
	"fmt"
	"time"
)

// ClaimReport claims the one report of an occurrence (what, e.g. an OOM
// kill's count in one incarnation) about sandbox sid, fleet-wide, for
// ttl: the first caller gets true, the others false. Every replica that
// samples a sandbox sees its OOM kills; this makes one event of each. One
// SET NX: no condition beyond the key's absence, so no Lua.
func (s *Store) ClaimReport(ctx context.Context, sid, what string, ttl time.Duration) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, s.keys.Report(sid, what), "1", ttl).Result()
	if err != nil {
		return false, fmt.Errorf("claim report: %w", err)
	}
	return ok, nil
}
