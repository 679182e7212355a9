package statedb

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/state"
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

// GetWithOptions reads sid's record and its thread's create options in one
// round trip (both keys are in sid's slot): what a create reads under the
// sandbox's lock before it starts one.
func (s *Store) GetWithOptions(ctx context.Context, sid string) (rec state.Record, ok bool, options []byte, err error) {
	var h *redis.MapStringStringCmd
	var o *redis.StringCmd
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		h = p.HGetAll(ctx, s.keys.Sandbox(sid))
		o = p.Get(ctx, s.keys.Options(sid))
		return nil
	})
	if err := h.Err(); err != nil {
		return state.Record{}, false, nil, fmt.Errorf("read record: %w", err)
	}
	options, err = o.Bytes()
	if errors.Is(err, redis.Nil) {
		options, err = nil, nil
	}
	if err != nil {
		return state.Record{}, false, nil, fmt.Errorf("read create options: %w", err)
	}
	rec, ok = recordFromHash(sid, h.Val())
	return rec, ok, options, nil
}
