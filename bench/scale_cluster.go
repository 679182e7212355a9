package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// benchCluster is a Redis Cluster of real redis-server processes this run
// started: every node a master, no replicas, all 16384 slots covered.
type benchCluster struct {
	dir   string
	addrs []string
	nodes []*service
}

// startBenchCluster starts n cluster-enabled redis-servers under dir and
// joins them: `redis-cli --cluster create` for n ≥ 3 (its minimum), one node
// given every slot with CLUSTER ADDSLOTSRANGE for n = 1, so that both
// configurations speak the Cluster protocol through the same client.
func startBenchCluster(ctx context.Context, dir string, n int) (_ *benchCluster, err error) {
	c := &benchCluster{dir: dir}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	for i := range n {
		port, err := clusterPort()
		if err != nil {
			return nil, err
		}
		nodeDir := filepath.Join(dir, fmt.Sprintf("node-%d", i))
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s, err := startService("redis-server", filepath.Join(nodeDir, "redis.log"), "redis-server",
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", nodeDir,
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"),
			"--cluster-node-timeout", "15000", "--maxclients", "10000")
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, s)
		c.addrs = append(c.addrs, addr)
		if err := s.waitUp(ctx, 10*time.Second, dialCheck(addr)); err != nil {
			return nil, err
		}
	}
	if n == 1 {
		rdb := redis.NewClient(&redis.Options{Addr: c.addrs[0]})
		err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err()
		rdb.Close()
		if err != nil {
			return nil, fmt.Errorf("cluster addslotsrange: %w", err)
		}
	} else {
		args := append([]string{"--cluster", "create"}, c.addrs...)
		args = append(args, "--cluster-replicas", "0", "--cluster-yes")
		if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
		}
	}
	return c, c.waitOK(ctx, time.Minute)
}

// waitOK waits until every node reports cluster_state:ok and sees all n
// nodes, so a client's first CLUSTER SLOTS is the final map.
func (c *benchCluster) waitOK(ctx context.Context, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for _, addr := range c.addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		for {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(c.addrs))) {
				break
			}
			select {
			case <-ctx.Done():
				rdb.Close()
				return fmt.Errorf("cluster at %s not ok: %w (last: %v %q)", addr, ctx.Err(), err, info)
			case <-time.After(50 * time.Millisecond):
			}
		}
		rdb.Close()
	}
	return nil
}

// client is a Cluster client over the nodes.
func (c *benchCluster) client(poolSize int) *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.addrs, PoolSize: poolSize,
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
}

// stop kills the nodes (their data is not needed: no save, no AOF) and
// removes their directories.
func (c *benchCluster) stop() {
	for _, s := range c.nodes {
		s.stop(syscall.SIGKILL, 0)
	}
	c.nodes = nil
	_ = os.RemoveAll(c.dir)
}

// clusterPort is a free port whose cluster bus port (port + 10000) is free too.
func clusterPort() (int, error) {
	for range 50 {
		addr, err := freeAddr()
		if err != nil {
			return 0, err
		}
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if port+10000 > 65535 {
			continue
		}
		if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000))); err == nil {
			ln.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port pair for a cluster node")
}

// nodeStats are one node's counters at one moment.
type nodeStats struct {
	commands int64   // total_commands_processed
	cpu      float64 // used_cpu_sys + used_cpu_user, seconds
	memory   int64   // used_memory, bytes
	keys     int64   // keys in db0
	calls    map[string]int64
}

// readNodeStats reads INFO of one node (its own connection: the figures are
// that node's alone). The INFO call itself adds one command.
func readNodeStats(ctx context.Context, addr string) (nodeStats, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	info, err := rdb.Info(ctx, "stats", "cpu", "memory", "keyspace", "commandstats").Result()
	if err != nil {
		return nodeStats{}, fmt.Errorf("INFO %s: %w", addr, err)
	}
	s := nodeStats{calls: map[string]int64{}}
	var sys, user float64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case k == "total_commands_processed":
			s.commands, _ = strconv.ParseInt(v, 10, 64)
		case k == "used_cpu_sys":
			sys, _ = strconv.ParseFloat(v, 64)
		case k == "used_cpu_user":
			user, _ = strconv.ParseFloat(v, 64)
		case k == "used_memory":
			s.memory, _ = strconv.ParseInt(v, 10, 64)
		case k == "db0":
			for _, f := range strings.Split(v, ",") {
				if n, ok := strings.CutPrefix(f, "keys="); ok {
					s.keys, _ = strconv.ParseInt(n, 10, 64)
				}
			}
		case strings.HasPrefix(k, "cmdstat_"):
			for _, f := range strings.Split(v, ",") {
				if n, ok := strings.CutPrefix(f, "calls="); ok {
					s.calls[strings.TrimPrefix(k, "cmdstat_")], _ = strconv.ParseInt(n, 10, 64)
				}
			}
		}
	}
	s.cpu = sys + user
	return s, nil
}

// clusterStats reads every node's stats.
func (c *benchCluster) stats(ctx context.Context) ([]nodeStats, error) {
	out := make([]nodeStats, len(c.addrs))
	for i, a := range c.addrs {
		s, err := readNodeStats(ctx, a)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}
