package statedb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/backend"
)

// SetEgress stores the egress policy an admin chose for a sandbox (every
// later incarnation is created with it) and reports whether it differs
// from the one stored before. Steps: (1) the fleet marks the sandbox as one
// never to be offered a pre-started sandbox (which runs the fleet's policy);
// (2) one SET ... GET. A crash after (1) only costs that thread a cold start.
func (s *Store) SetEgress(ctx context.Context, sid string, e backend.Egress) (changed bool, err error) {
	data, err := json.Marshal(e)
	if err != nil {
		return false, fmt.Errorf("encode egress policy: %w", err)
	}
	if err := s.rdb.SAdd(ctx, s.keys.fleetKeys()[5], sid).Err(); err != nil {
		return false, fmt.Errorf("mark egress policy: %w", err)
	}
	_, changed, err = s.replace(ctx, s.keys.Egress(sid), data)
	if err != nil {
		return false, fmt.Errorf("store egress policy: %w", err)
	}
	return changed, nil
}

// Egress returns a sandbox's stored egress policy, if an admin set one.
func (s *Store) Egress(ctx context.Context, sid string) (backend.Egress, bool, error) {
	data, err := s.rdb.Get(ctx, s.keys.Egress(sid)).Bytes()
	if errors.Is(err, redis.Nil) {
		return backend.Egress{}, false, nil
	}
	if err != nil {
		return backend.Egress{}, false, fmt.Errorf("read egress policy: %w", err)
	}
	var e backend.Egress
	if err := json.Unmarshal(data, &e); err != nil {
		return backend.Egress{}, false, fmt.Errorf("decode egress policy of %s: %w", sid, err)
	}
	return e, true, nil
}
