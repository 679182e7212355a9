package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis modes (-redis): one redis-server, or a Redis Cluster.
const (
	redisSingle  = "single"
	redisCluster = "cluster"
)

// stateRedis is the Redis the gateways keep their state in, and the faults
// it suffers in the rotation after the gateway and sandbox kills.
type stateRedis interface {
	url() string  // the gateways' --redis-url
	addr() string // where it listens, for the log
	// client reaches the state as the gateways do (a Cluster client for a
	// Cluster).
	client() redis.UniversalClient
	faults() []string
	// inject inflicts one of its faults and repairs it before returning;
	// instant faults (nothing to repair) say so.
	inject(ctx context.Context, kind string, rng *rand.Rand) (target string, instant bool, err error)
	// describe is the report's words for it and its faults' parameters.
	describe() string
	stop()
}

func startStateRedis(ctx context.Context, cfg config, dir string, logf func(string, ...any)) (stateRedis, error) {
	if cfg.Redis == redisCluster {
		return startRedisCluster(ctx, dir, logf)
	}
	return startRedis(ctx, dir, cfg.RedisDown)
}

// Faults of one redis-server.
const (
	faultRedis = "Redis crash + empty restart"
	faultFlush = "Redis FLUSHALL"
)

// redisProc is a redis-server without persistence: a restart starts empty.
type redisProc struct {
	dir  string
	host string
	down time.Duration // how long a crash keeps it down
	cmd  *exec.Cmd
}

func startRedis(ctx context.Context, dir string, down time.Duration) (*redisProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &redisProc{dir: dir, down: down, host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	return r, r.start(ctx)
}

func (r *redisProc) url() string  { return "redis://" + r.host + "/0" }
func (r *redisProc) addr() string { return r.host }

func (r *redisProc) client() redis.UniversalClient {
	return redis.NewClient(&redis.Options{Addr: r.host})
}

func (r *redisProc) faults() []string { return []string{faultRedis, faultFlush} }

func (r *redisProc) describe() string {
	return fmt.Sprintf("one `redis-server` without persistence; its faults: %s (down %s), %s", faultRedis, r.down, faultFlush)
}

func (r *redisProc) inject(ctx context.Context, kind string, _ *rand.Rand) (string, bool, error) {
	switch kind {
	case faultRedis:
		r.stop()
		time.Sleep(r.down)
		return r.host, false, r.start(ctx)
	case faultFlush:
		rdb := r.client()
		defer rdb.Close()
		return r.host, true, rdb.FlushAll(ctx).Err()
	}
	return "", true, fmt.Errorf("no fault %q on a redis-server", kind)
}

func (r *redisProc) start(ctx context.Context) error {
	_, port, _ := net.SplitHostPort(r.host)
	r.cmd = exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--maxclients", "2000")
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", r.host, 100*time.Millisecond)
		if err == nil {
			conn.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("redis-server did not start on %s", r.host)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop is a crash (SIGKILL): with no persistence every key is gone.
func (r *redisProc) stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}
