package statedb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/state"

	"github.com/redis/go-redis/v9"
)

// The status page's browser sessions. A session is stored under the
// SHA-256 of its id (never the id: what Redis holds does not open a
// session), as a sealed blob the router makes and opens; every replica
// reads the same key, and its TTL is the session's expiry. Each user's set
// of session keys lets the user or an admin revoke them all. No conditional
// write spans two keys, so no script: a session whose index entry was lost
// still expires, and revoking deletes the session keys first.

// PutSession stores a new session for ttl; an id already in use (a
// collision of 256 random bits, or a replay) is refused.
func (s *Store) PutSession(ctx context.Context, sumHex, user string, sealed []byte, ttl time.Duration) error {
	key := s.keys.Session(sumHex)
	ok, err := s.rdb.SetNX(ctx, key, sealed, ttl).Result()
	if err != nil {
		return fmt.Errorf("put session: %w", err)
	}
	if !ok {
		return fmt.Errorf("put session: %w", errors.New("id in use"))
	}
	idx := s.keys.Sessions(user)
	// Every session lives ttl, so the newest one's expiry covers the set.
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, idx, key)
		p.PExpire(ctx, idx, ttl)
		return nil
	})
	if err != nil {
		return fmt.Errorf("index session: %w", err)
	}
	return nil
}

// Session returns the sealed session stored under sumHex.
func (s *Store) Session(ctx context.Context, sumHex string) ([]byte, error) {
	b, err := s.rdb.Get(ctx, s.keys.Session(sumHex)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, state.ErrNoSession
	}
	if err != nil {
		return nil, fmt.Errorf("get session: %w", err)
	}
	return b, nil
}

// DropSession revokes one session of user.
func (s *Store) DropSession(ctx context.Context, sumHex, user string) error {
	key := s.keys.Session(sumHex)
	if err := s.rdb.Del(ctx, key).Err(); err != nil {
		return fmt.Errorf("drop session: %w", err)
	}
	if err := s.rdb.SRem(ctx, s.keys.Sessions(user), key).Err(); err != nil {
		return fmt.Errorf("drop session: %w", err)
	}
	return nil
}

// DropSessions revokes every session of user and says how many were live.
func (s *Store) DropSessions(ctx context.Context, user string) (int, error) {
	idx := s.keys.Sessions(user)
	keys, err := s.rdb.SMembers(ctx, idx).Result()
	if err != nil {
		return 0, fmt.Errorf("list sessions: %w", err)
	}
	n := 0
	// One DEL per key: they sit in different Cluster slots.
	for _, key := range keys {
		d, err := s.rdb.Del(ctx, key).Result()
		if err != nil {
			return n, fmt.Errorf("drop sessions: %w", err)
		}
		n += int(d)
	}
	if len(keys) > 0 {
		if err := s.rdb.SRem(ctx, idx, toAny(keys)...).Err(); err != nil {
			return n, fmt.Errorf("drop sessions: %w", err)
		}
	}
	return n, nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
