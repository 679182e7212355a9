package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/testutil"
)

// Faults of a Redis Cluster of 3 masters with a replica each.
const (
	faultMasterKill   = "Cluster master kill -9 (failover)"
	faultMasterPause  = "Cluster master paused past the node timeout"
	faultSlots        = "Cluster slot migration"
	faultClusterRepl  = "Cluster replica kill -9 + restart"
	clusterHealBound  = 90 * time.Second // a failover takes the 2 s node timeout and an election; load stretches it
	clusterMigrateMax = 1024             // slots moved per migration: a few buckets and their sandboxes' keys
)

// redisClusterState is testutil's Redis Cluster (3 masters + 3 replicas,
// node timeout 2 s) as the soak's state store.
type redisClusterState struct {
	h *harness
	c *testutil.RedisCluster
}

func startRedisCluster(ctx context.Context, dir string, logf func(string, ...any)) (*redisClusterState, error) {
	s := &redisClusterState{h: &harness{dir: dir, logf: logf}}
	err := guard(func() error {
		s.c = testutil.StartRedisClusterWithReplicas(s.h, 3, 1)
		return nil
	})
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("redis cluster: %w", err)
	}
	return s, ctx.Err()
}

func (s *redisClusterState) url() string  { return s.c.URL() }
func (s *redisClusterState) addr() string { return strings.Join(s.c.Addrs(), " ") }

func (s *redisClusterState) client() redis.UniversalClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.c.Addrs()})
}

func (s *redisClusterState) faults() []string {
	return []string{faultMasterKill, faultMasterPause, faultSlots, faultClusterRepl}
}

func (s *redisClusterState) describe() string {
	return fmt.Sprintf("a Redis Cluster of 3 masters with a replica each (no persistence, node timeout 2 s); its faults: "+
		"%s (the replica promoted, the old master restarted empty as its replica), %s (then resumed: it rejoins as a replica), "+
		"%s (up to %d slots and their keys moved between two masters, slot by slot with MIGRATE, as `redis-cli --cluster reshard`), %s (down 1s)",
		faultMasterKill, faultMasterPause, faultSlots, clusterMigrateMax, faultClusterRepl)
}

// inject inflicts kind and returns once the cluster healed: every slot
// served and every replica in sync, so the next fault finds a cluster that
// can fail over again.
func (s *redisClusterState) inject(ctx context.Context, kind string, rng *rand.Rand) (target string, instant bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, clusterHealBound)
	defer cancel()
	err = guard(func() error {
		masters, err := s.c.Masters(ctx)
		if err != nil || len(masters) < 2 {
			return fmt.Errorf("masters %v: %v", masters, err)
		}
		m := masters[rng.IntN(len(masters))]
		target = "master " + m
		switch kind {
		case faultMasterKill:
			s.c.Kill(m)
			if err := s.c.WaitHealthy(ctx, m); err != nil {
				return err
			}
			if err := s.c.Restart(m); err != nil {
				return err
			}
		case faultMasterPause:
			s.c.Pause(m)
			err := s.c.WaitHealthy(ctx, m)
			s.c.Resume(m)
			if err != nil {
				return err
			}
		case faultSlots:
			to := masters[(slices.Index(masters, m)+1)%len(masters)]
			first, last, err := s.c.SlotsOf(ctx, m)
			if err != nil {
				return err
			}
			last = min(first+(last-first)/2, first+clusterMigrateMax-1)
			moved, err := s.c.MigrateSlots(ctx, m, to, first, last)
			target = fmt.Sprintf("slots %d-%d (%d keys) %s -> %s", first, last, moved, m, to)
			if err != nil {
				return err
			}
		case faultClusterRepl:
			r, err := s.replica(ctx, rng)
			if err != nil {
				return err
			}
			target = "replica " + r
			s.c.Kill(r)
			time.Sleep(time.Second)
			if err := s.c.Restart(r); err != nil {
				return err
			}
		default:
			return fmt.Errorf("no fault %q on a Redis Cluster", kind)
		}
		if err := s.c.WaitHealthy(ctx); err != nil {
			return err
		}
		return s.c.WaitSynced(ctx)
	})
	return target, false, err
}

// replica is a random replica the cluster does not flag failed.
func (s *redisClusterState) replica(ctx context.Context, rng *rand.Rand) (string, error) {
	nodes, err := s.c.Nodes(ctx)
	if err != nil {
		return "", err
	}
	var out []string
	for _, n := range nodes {
		if !n.Master && !n.Failed {
			out = append(out, n.Addr)
		}
	}
	if len(out) == 0 {
		return "", fmt.Errorf("no replica in %+v", nodes)
	}
	return out[rng.IntN(len(out))], nil
}

func (s *redisClusterState) stop() {
	if s.c != nil {
		s.c.Stop()
	}
	s.h.cleanup()
}

// harness is the testing.TB testutil's Redis Cluster takes, for a command:
// Fatalf panics, and guard turns that back into an error. testutil calls
// only the methods below; the nil embedded TB panics on any other.
type harness struct {
	testing.TB
	dir      string
	logf     func(string, ...any)
	cleanups []func()
}

type harnessFatal struct{ err error }

func (h *harness) Helper()                   {}
func (h *harness) Logf(f string, a ...any)   { h.logf(f, a...) }
func (h *harness) Fatalf(f string, a ...any) { panic(harnessFatal{fmt.Errorf(f, a...)}) }
func (h *harness) Skipf(f string, a ...any)  { h.Fatalf(f, a...) }
func (h *harness) Cleanup(f func())          { h.cleanups = append(h.cleanups, f) }

func (h *harness) TempDir() string {
	d, err := os.MkdirTemp(h.dir, "redis-cluster-")
	if err != nil {
		h.Fatalf("temp dir: %v", err)
	}
	return d
}

func (h *harness) cleanup() {
	for i := len(h.cleanups) - 1; i >= 0; i-- {
		h.cleanups[i]()
	}
	h.cleanups = nil
}

// guard runs fn and returns a harness Fatalf inside it as an error.
func guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(harnessFatal)
			if !ok {
				panic(r)
			}
			err = f.err
		}
	}()
	return fn()
}
