package statedb

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sandgate/sandgate/internal/state"

	"github.com/redis/go-redis/v9"
)

// Overview reads every active, warm and creating sandbox: O(pool), for the
// status page, never for a request. A reservation past its deadline (a
// replica died mid-create) is left out, as the capacity check drops it,
// and so is one whose sandbox is already indexed: its create answered and
// the commit that gives the reservation back runs after the answer.
func (s *Store) Overview(ctx context.Context, now time.Time) (state.Overview, error) {
	pipe := s.rdb.Pipeline()
	n := s.keys.Buckets()
	a, w := make([]*redis.ZSliceCmd, n), make([]*redis.ZSliceCmd, n)
	for b := range n {
		a[b] = pipe.ZRangeWithScores(ctx, s.keys.Active(b), 0, -1)
		w[b] = pipe.ZRangeWithScores(ctx, s.keys.Warm(b), 0, -1)
	}
	c := pipe.ZRangeByScoreWithScores(ctx, s.keys.Creating(), &redis.ZRangeBy{Min: strconv.FormatInt(ms(now), 10), Max: "+inf"})
	users := pipe.HGetAll(ctx, s.keys.fleetKeys()[2])
	if _, err := pipe.Exec(ctx); err != nil {
		return state.Overview{}, fmt.Errorf("read pool indexes: %w", err)
	}
	var active, warm []redis.Z
	for b := range n {
		active = append(active, a[b].Val()...)
		warm = append(warm, w[b].Val()...)
	}
	var ov state.Overview
	var err error
	if ov.Active, err = s.entries(ctx, active); err != nil {
		return state.Overview{}, err
	}
	if ov.Warm, err = s.entries(ctx, warm); err != nil {
		return state.Overview{}, err
	}
	indexed := make(map[string]bool, len(active)+len(warm))
	for _, zs := range [][]redis.Z{active, warm} {
		for _, z := range zs {
			indexed[z.Member.(string)] = true
		}
	}
	for _, z := range c.Val() {
		sid := z.Member.(string)
		if indexed[sid] {
			continue
		}
		ov.Creating = append(ov.Creating, state.Entry{Record: state.Record{SandboxID: sid, User: users.Val()[sid], State: "creating"},
			Since: time.UnixMilli(int64(z.Score))})
	}
	return ov, nil
}

func (s *Store) entries(ctx context.Context, zs []redis.Z) ([]state.Entry, error) {
	ids := make([]string, len(zs))
	since := make(map[string]time.Time, len(zs))
	for i, z := range zs {
		ids[i] = z.Member.(string)
		since[ids[i]] = time.UnixMilli(int64(z.Score))
	}
	recs, err := s.records(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]state.Entry, len(recs))
	for i, rec := range recs {
		out[i] = state.Entry{Record: rec, Since: since[rec.SandboxID]}
	}
	return out, nil
}

// replicaKeep is how long a replica that stopped beating stays listed
// (as not alive) before a heartbeat drops it.
const replicaKeep = time.Hour

// Beat records that replica instance is alive at now, and drops replicas
// silent for longer than replicaKeep. Both are single commands: a beat
// never depends on what another replica wrote.
func (s *Store) Beat(ctx context.Context, instance string, now time.Time) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, s.keys.Replicas(), redis.Z{Score: float64(ms(now)), Member: instance})
		p.ZRemRangeByScore(ctx, s.keys.Replicas(), "-inf", "("+strconv.FormatInt(ms(now.Add(-replicaKeep)), 10))
		return nil
	})
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// Replicas returns the replicas that beat in the last hour, newest first.
func (s *Store) Replicas(ctx context.Context) ([]state.Replica, error) {
	zs, err := s.rdb.ZRevRangeWithScores(ctx, s.keys.Replicas(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("read replicas: %w", err)
	}
	out := make([]state.Replica, len(zs))
	for i, z := range zs {
		out[i] = state.Replica{Instance: z.Member.(string), Seen: time.UnixMilli(int64(z.Score))}
	}
	return out, nil
}
