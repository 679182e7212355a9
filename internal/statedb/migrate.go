package statedb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// LayoutVersion is the key layout this code reads and writes: 2, keys
// spread over slots (keys.go). Layout 1 kept every key under the configured
// prefix's one hash tag.
const LayoutVersion = 2

// MigrateReport says what Migrate moved from layout 1.
type MigrateReport struct {
	Migrated                 bool
	Records, Aliases, Egress int
}

// ErrLayout: Redis holds a layout this gateway cannot use as configured.
var ErrLayout = errors.New("redis key layout")

// migrateLockTTL bounds how long a replica that died migrating holds the
// others back.
const migrateLockTTL = time.Minute

// Migrate makes sure the prefix holds layout 2 with this store's bucket
// count, before the gateway serves: a prefix without state is stamped; the
// layout 1 state under the configured prefix is moved over, once, by the
// first replica to get the migration lock (the others wait for the stamp);
// layout 2 with another bucket count is refused (the buckets would not find
// their sandboxes). Every write is idempotent and the stamp comes last, so
// a replica dying half way leaves a migration the next start redoes.
//
// Creates in progress under layout 1 (reservations) and create-rate state
// are not carried over: the first expire anyway, the second starts full.
// Replicas still running layout 1 code write where nobody reads any more:
// the reconciler adopts what they create.
func (s *Store) Migrate(ctx context.Context, now time.Time) (MigrateReport, error) {
	want := fmt.Sprintf("%d %d", LayoutVersion, s.keys.Buckets())
	token := randomToken()
	deadline := time.Now().Add(migrateLockTTL + 5*time.Second)
	for {
		got, err := s.rdb.Get(ctx, s.keys.Layout()).Result()
		if err == nil {
			if got != want {
				return MigrateReport{}, fmt.Errorf("%w: redis_prefix %q holds layout %q (version, buckets), this gateway is configured for %q: keep redis_buckets as it was",
					ErrLayout, s.keys.legacy, got, want)
			}
			return MigrateReport{}, nil
		}
		if !errors.Is(err, redis.Nil) {
			return MigrateReport{}, fmt.Errorf("read layout: %w", err)
		}
		ok, err := s.rdb.SetNX(ctx, s.keys.Layout()+":lock", token, migrateLockTTL).Result()
		if err != nil {
			return MigrateReport{}, fmt.Errorf("take migration lock: %w", err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return MigrateReport{}, fmt.Errorf("%w: another replica has been migrating for over %s", ErrLayout, migrateLockTTL)
		}
		select {
		case <-ctx.Done():
			return MigrateReport{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	defer s.rdb.Del(context.WithoutCancel(ctx), s.keys.Layout()+":lock")
	rep, old, err := s.migrateV1(ctx, now)
	if err != nil {
		return rep, fmt.Errorf("migrate layout 1: %w", err)
	}
	if err := s.rdb.Set(ctx, s.keys.Layout(), want, 0).Err(); err != nil {
		return rep, fmt.Errorf("stamp layout: %w", err)
	}
	for _, k := range old {
		if err := s.rdb.Del(ctx, k).Err(); err != nil {
			return rep, fmt.Errorf("delete layout 1 key: %w", err)
		}
	}
	return rep, nil
}

// migrateV1 copies layout 1's state into layout 2 and returns the layout 1
// keys to delete once the stamp is written.
func (s *Store) migrateV1(ctx context.Context, now time.Time) (MigrateReport, []string, error) {
	var rep MigrateReport
	l := s.keys.legacy
	recKeys, err := s.scan(ctx, l+"sbx:*")
	if err != nil {
		return rep, nil, err
	}
	egressKeys, err := s.scan(ctx, l+"egress:*")
	if err != nil {
		return rep, nil, err
	}
	all, err := s.scan(ctx, l+"*")
	if err != nil {
		return rep, nil, err
	}
	// A prefix configured without braces is layout 2's too: its keys go on with '{'.
	var rest []string
	for _, k := range all {
		if !strings.HasPrefix(k, s.keys.prefix+"{") {
			rest = append(rest, k)
		}
	}
	if len(rest) == 0 {
		return rep, nil, nil
	}
	rep.Migrated = true
	scores := map[string]float64{}
	for _, name := range []string{"active", "warm", "prewarm"} {
		zs, err := s.rdb.ZRangeWithScores(ctx, l+name, 0, -1).Result()
		if err != nil {
			return rep, nil, err
		}
		for _, z := range zs {
			scores[z.Member.(string)] = z.Score
		}
	}
	for _, key := range recKeys {
		sid, _ := strings.CutPrefix(key, l+"sbx:")
		h, err := s.rdb.HGetAll(ctx, key).Result()
		if err != nil {
			return rep, nil, err
		}
		if len(h) == 0 {
			continue
		}
		if err := s.migrateRecord(ctx, sid, h, scores, now); err != nil {
			return rep, nil, fmt.Errorf("record %s: %w", sid, err)
		}
		rep.Records++
	}
	aliases, err := s.rdb.HGetAll(ctx, l+"aliases").Result()
	if err != nil {
		return rep, nil, err
	}
	for field, sid := range aliases {
		if user, alias, ok := strings.Cut(field, ":"); ok {
			if err := s.SetAlias(ctx, user, alias, sid); err != nil {
				return rep, nil, err
			}
			rep.Aliases++
		}
	}
	for _, key := range egressKeys {
		sid, _ := strings.CutPrefix(key, l+"egress:")
		data, err := s.rdb.Get(ctx, key).Result()
		if err != nil {
			return rep, nil, err
		}
		if err := s.rdb.SAdd(ctx, s.keys.fleetKeys()[5], sid).Err(); err != nil {
			return rep, nil, err
		}
		if err := s.rdb.Set(ctx, s.keys.Egress(sid), data, 0).Err(); err != nil {
			return rep, nil, err
		}
		rep.Egress++
	}
	buckets := make([]int, s.keys.Buckets())
	for b := range buckets {
		buckets[b] = b
	}
	if err := s.SyncCounts(ctx, buckets); err != nil {
		return rep, nil, err
	}
	return rep, rest, nil
}

// migrateRecord writes one layout 1 record (h) into layout 2, indexed by its
// state with its layout 1 score (activity, release or creation). The
// stamp is written after every record, so one cut short is written again.
func (s *Store) migrateRecord(ctx context.Context, sid string, h map[string]string, scores map[string]float64, now time.Time) error {
	args := make([]any, 0, 2*len(h))
	for k, v := range h {
		args = append(args, k, v)
	}
	at := time.UnixMilli(int64(scores[sid]))
	if _, ok := scores[sid]; !ok {
		at = now
	}
	key := s.keys.Sandbox(sid)
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key)
		p.HSet(ctx, key, args...)
		return nil
	}); err != nil {
		return err
	}
	if sum := h["cap_sum"]; sum != "" {
		if err := s.rdb.Set(ctx, s.keys.Cap(sum), sid, 0).Err(); err != nil {
			return err
		}
	}
	rec, _ := recordFromHash(sid, h)
	return s.reindex(ctx, rec, at)
}

func randomToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
