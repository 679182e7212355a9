package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// DeerFlow's provisioner clients choose their own sandbox ids (its formula
// has changed between versions); the provisioner API keeps their id as an
// alias of the sandbox Sandgate derives from (user, thread).

// SetAlias records that the client id alias names sid.
func (s *Store) SetAlias(ctx context.Context, alias, sid string) error {
	if err := s.rdb.HSet(ctx, s.keys.Aliases(), alias, sid).Err(); err != nil {
		return fmt.Errorf("write alias: %w", err)
	}
	return nil
}

// Alias resolves a client id; ok is false when it is unknown.
func (s *Store) Alias(ctx context.Context, alias string) (string, bool, error) {
	sid, err := s.rdb.HGet(ctx, s.keys.Aliases(), alias).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read alias: %w", err)
	}
	return sid, true, nil
}

// DeleteAlias forgets a client id.
func (s *Store) DeleteAlias(ctx context.Context, alias string) error {
	if err := s.rdb.HDel(ctx, s.keys.Aliases(), alias).Err(); err != nil {
		return fmt.Errorf("delete alias: %w", err)
	}
	return nil
}

// AliasesBySandbox returns sid -> client id for every alias.
func (s *Store) AliasesBySandbox(ctx context.Context) (map[string]string, error) {
	all, err := s.rdb.HGetAll(ctx, s.keys.Aliases()).Result()
	if err != nil {
		return nil, fmt.Errorf("read aliases: %w", err)
	}
	out := make(map[string]string, len(all))
	for alias, sid := range all {
		out[sid] = alias
	}
	return out, nil
}
