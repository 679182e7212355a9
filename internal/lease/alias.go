package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// DeerFlow's provisioner clients choose their own sandbox ids (its formula
// has changed between versions); the provisioner API keeps their id as an
// alias of the sandbox Sandgate derives from (user, thread). Aliases are per
// user: the field is "{user}:{alias}" (a user name never holds ':'), so one
// user's alias can neither shadow nor reveal another user's.

func aliasField(user, alias string) string { return user + ":" + alias }

// SetAlias records that user's client id alias names sid.
func (s *Store) SetAlias(ctx context.Context, user, alias, sid string) error {
	if err := s.rdb.HSet(ctx, s.keys.Aliases(), aliasField(user, alias), sid).Err(); err != nil {
		return fmt.Errorf("write alias: %w", err)
	}
	return nil
}

// Alias resolves user's client id; ok is false when it is unknown.
func (s *Store) Alias(ctx context.Context, user, alias string) (string, bool, error) {
	sid, err := s.rdb.HGet(ctx, s.keys.Aliases(), aliasField(user, alias)).Result()
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
	if err := s.rdb.HDel(ctx, s.keys.Aliases(), aliasField(user, alias)).Err(); err != nil {
		return fmt.Errorf("delete alias: %w", err)
	}
	return nil
}

// AliasesBySandbox returns sid -> client id for every alias of user, or of
// every user when user is "" (an admin's listing).
func (s *Store) AliasesBySandbox(ctx context.Context, user string) (map[string]string, error) {
	all, err := s.rdb.HGetAll(ctx, s.keys.Aliases()).Result()
	if err != nil {
		return nil, fmt.Errorf("read aliases: %w", err)
	}
	out := make(map[string]string)
	for field, sid := range all {
		owner, alias, ok := strings.Cut(field, ":") // user names hold no ':'
		if ok && (user == "" || owner == user) {
			out[sid] = alias
		}
	}
	return out, nil
}
