package statedb

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// SetOptions stores a thread's create options (the pool's encoding; every
// later incarnation is made from them) and returns those stored before
// (nil: none) and whether they differ. One SET ... GET: no condition to
// keep.
func (s *Store) SetOptions(ctx context.Context, sid string, data []byte) (old []byte, changed bool, err error) {
	old, changed, err = s.replace(ctx, s.keys.Options(sid), data)
	if err != nil {
		return nil, false, fmt.Errorf("store create options: %w", err)
	}
	return old, changed, nil
}

// replace sets key to data in one SET ... GET and returns what it held
// before (nil: nothing) and whether that differs.
func (s *Store) replace(ctx context.Context, key string, data []byte) (old []byte, changed bool, err error) {
	old, err = s.rdb.SetArgs(ctx, key, data, redis.SetArgs{Get: true}).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return old, string(old) != string(data), nil
}

// Options returns a thread's stored create options, if a create set them.
func (s *Store) Options(ctx context.Context, sid string) ([]byte, bool, error) {
	data, err := s.rdb.Get(ctx, s.keys.Options(sid)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read create options: %w", err)
	}
	return data, true, nil
}
