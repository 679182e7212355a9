package statedb

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// DeerFlow's provisioner clients choose their own sandbox ids (its formula
// has changed between versions); the provisioner API keeps their id as an
// alias of the sandbox Sandgate derives from (user, thread). Aliases are per
// user, in the user's own hash, so one user's alias can neither shadow nor
// reveal another user's, and a user's listing is one read.

// SetAlias records that user's client id alias names sid.
func (s *Store) SetAlias(ctx context.Context, user, alias, sid string) error {
	if err := s.rdb.HSet(ctx, s.keys.Aliases(user), alias, sid).Err(); err != nil {
		return fmt.Errorf("write alias: %w", err)
	}
	return nil
}

// Alias resolves user's client id; ok is false when it is unknown.
func (s *Store) Alias(ctx context.Context, user, alias string) (string, bool, error) {
	sid, err := s.rdb.HGet(ctx, s.keys.Aliases(user), alias).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read alias: %w", err)
	}
	return sid, true, nil
}

// DeleteAlias forgets user's client id.
func (s *Store) DeleteAlias(ctx context.Context, user, alias string) error {
	if err := s.rdb.HDel(ctx, s.keys.Aliases(user), alias).Err(); err != nil {
		return fmt.Errorf("delete alias: %w", err)
	}
	return nil
}

// AliasesBySandbox returns sid -> client id for every alias of user, or of
// every user when user is "" (an admin's listing: a scan of every node).
func (s *Store) AliasesBySandbox(ctx context.Context, user string) (map[string]string, error) {
	keys := []string{s.keys.Aliases(user)}
	if user == "" {
		var err error
		if keys, err = s.scan(ctx, s.keys.Aliases("*")); err != nil {
			return nil, fmt.Errorf("find aliases: %w", err)
		}
	}
	out := make(map[string]string)
	for _, k := range keys {
		all, err := s.rdb.HGetAll(ctx, k).Result()
		if err != nil {
			return nil, fmt.Errorf("read aliases: %w", err)
		}
		for alias, sid := range all {
			out[sid] = alias
		}
	}
	return out, nil
}

// scan returns the keys matching pattern on every node.
func (s *Store) scan(ctx context.Context, pattern string) ([]string, error) {
	var (
		mu   sync.Mutex
		keys []string
	)
	each := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, 512).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return each(ctx, c) })
		return keys, err
	}
	return keys, each(ctx, s.rdb)
}
