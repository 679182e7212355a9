package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a real Redis Cluster of redis-server child processes on
// loopback ports, the 16384 slots split between its masters by redis-cli
// --cluster create, each master with as many replicas as asked (none by
// default).
type RedisCluster struct {
	t     testing.TB
	dir   string
	nodes []*clusterNode
}

type clusterNode struct {
	port, busPort int
	cmd           *exec.Cmd
	done          chan struct{}
	logs          *LogBuffer
	paused        bool // SIGSTOPped by Pause: up, but answers nobody
}

func (n *clusterNode) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// clusterReadyTimeout bounds the wait for cluster_state:ok on every node: a
// few hundred milliseconds on an idle machine, seconds at load 20.
const clusterReadyTimeout = 30 * time.Second

// nodeStartAttempts is how often a node is started on fresh ports after its
// port was taken meanwhile.
const nodeStartAttempts = 3

// StartRedisCluster starts a Redis Cluster of nodes masters (at least 3:
// redis-cli refuses fewer) for this test and kills it at cleanup. It
// returns once CLUSTER INFO says cluster_state:ok on every node. Under
// CI=true a missing redis-server or redis-cli fails the test (Require), as
// does any start failure, here always: a cluster that did not form is a
// broken environment or a broken helper, never a reason to skip.
func StartRedisCluster(t testing.TB, nodes int) *RedisCluster {
	t.Helper()
	return startRedisCluster(t, nodes, 0)
}

// StartRedisClusterWithReplicas is StartRedisCluster of masters masters,
// each with replicas replicas (redis-cli --cluster-replicas), the cluster
// node timeout 2000 ms: a failed master's replica is promoted a few seconds
// after the master stops answering.
func StartRedisClusterWithReplicas(t testing.TB, masters, replicas int) *RedisCluster {
	t.Helper()
	return startRedisCluster(t, masters, replicas)
}

func startRedisCluster(t testing.TB, masters, replicas int) *RedisCluster {
	t.Helper()
	nodes := masters * (1 + replicas)
	_, errServer := exec.LookPath("redis-server")
	Require(t, errServer == nil, "redis-server")
	_, errCLI := exec.LookPath("redis-cli")
	Require(t, errCLI == nil, "redis-cli")
	if masters < 3 {
		t.Fatalf("StartRedisCluster: %d masters; a cluster needs at least 3", masters)
	}
	began := time.Now()
	c := &RedisCluster{t: t, dir: t.TempDir()}
	t.Cleanup(c.Stop)
	// The nodes start in parallel; each gets its ports for every attempt
	// here, on the test's goroutine (FreePort may t.Fatal).
	type started struct {
		n   *clusterNode
		err error
	}
	results := make([]chan started, nodes)
	for i := range nodes {
		var ports [nodeStartAttempts][2]int
		for a := range ports {
			ports[a] = [2]int{FreePort(t), FreePort(t)}
		}
		results[i] = make(chan started, 1)
		go func() {
			n, err := c.startNode(ports[:])
			results[i] <- started{n, err}
		}()
	}
	var errs []error
	for _, r := range results {
		s := <-r
		if s.n != nil {
			c.nodes = append(c.nodes, s.n) // killed at cleanup, even if another failed
		}
		errs = append(errs, s.err)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("redis cluster: %v", err)
	}
	up := time.Now()
	if err := c.create(replicas); err != nil {
		t.Fatalf("redis cluster: %v", err)
	}
	created := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	if err := c.waitOK(ctx); err != nil {
		t.Fatalf("redis cluster of %d nodes not ready in %s: %v", nodes, clusterReadyTimeout, err)
	}
	if err := c.waitReplicasLinked(ctx); err != nil {
		t.Fatalf("redis cluster replicas not in sync in %s: %v", clusterReadyTimeout, err)
	}
	t.Logf("redis cluster %s up in %s (servers %s, redis-cli create %s, cluster_state:ok %s)", strings.Join(c.Addrs(), " "),
		time.Since(began).Round(time.Millisecond), up.Sub(began).Round(time.Millisecond),
		created.Sub(up).Round(time.Millisecond), time.Since(created).Round(time.Millisecond))
	return c
}

// startNode starts one cluster-enabled redis-server. FreePort's port can be
// taken by another test before redis-server binds it (it then exits), and
// a listener on the port may be another test's server: a node counts as up
// only once the server answering there reports this child's pid.
// ports holds a {port, bus port} pair per attempt.
func (c *RedisCluster) startNode(ports [][2]int) (*clusterNode, error) {
	var last error
	for _, p := range ports {
		// The cluster bus port is set explicitly: the default, port+10000,
		// is past 65535 for half the ephemeral range.
		n := &clusterNode{port: p[0], busPort: p[1], logs: &LogBuffer{}}
		if err := c.launch(n); err != nil {
			return nil, err
		}
		if last = n.waitUp(); last == nil {
			return n, nil
		}
		n.kill()
	}
	return nil, last
}

// launch starts n's redis-server on its ports with its nodes file: a node
// started again after a kill rejoins the cluster as the node it was.
func (c *RedisCluster) launch(n *clusterNode) error {
	n.done = make(chan struct{})
	n.cmd = exec.Command("redis-server",
		"--port", strconv.Itoa(n.port), "--bind", "127.0.0.1",
		"--cluster-enabled", "yes",
		"--cluster-port", strconv.Itoa(n.busPort),
		"--cluster-config-file", filepath.Join(c.dir, fmt.Sprintf("nodes-%d.conf", n.port)),
		"--cluster-node-timeout", "2000",
		"--save", "", "--appendonly", "no", "--dir", c.dir)
	n.cmd.Stdout, n.cmd.Stderr = n.logs, n.logs
	if err := n.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	return nil
}

// waitUp waits until the node answers as itself. It dials plainly until
// the port accepts: go-redis retries a refused dial five times 100 ms apart
// (and logs it), which would be most of the start.
func (n *clusterNode) waitUp() error {
	want := "process_id:" + strconv.Itoa(n.cmd.Process.Pid)
	deadline := time.Now().Add(10 * time.Second)
	var last error
	for {
		select {
		case <-n.done:
			return fmt.Errorf("redis-server on %s exited at start:\n%s", n.addr(), tailString(n.logs.String(), 10))
		default:
		}
		if conn, err := net.DialTimeout("tcp", n.addr(), 200*time.Millisecond); err != nil {
			last = err
		} else {
			conn.Close()
			rdb := redis.NewClient(&redis.Options{Addr: n.addr(), MaxRetries: -1})
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := rdb.Info(ctx, "server").Result()
			cancel()
			rdb.Close()
			if err == nil && strings.Contains(info, want) {
				return nil
			}
			last = err
			if err == nil {
				last = errors.New("another redis-server answers there")
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server did not start on %s (last: %v)", n.addr(), last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// create joins the nodes into one cluster, assigns the slots and makes
// replicas replicas of each master.
func (c *RedisCluster) create(replicas int) error {
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	if !strings.Contains(string(out), "[OK] All 16384 slots covered") {
		return fmt.Errorf("redis-cli %s did not cover all slots:\n%s", strings.Join(args, " "), out)
	}
	return nil
}

// waitOK polls CLUSTER INFO on every live node (not killed, not paused)
// until each says cluster_state:ok, knows every node and sees every slot
// served.
func (c *RedisCluster) waitOK(ctx context.Context) error {
	pending := c.liveAddrs()
	var last error
	for {
		var still []string
		for _, addr := range pending {
			if err := nodeOK(ctx, addr, len(c.nodes)); err != nil {
				still = append(still, addr)
				if last == nil || ctx.Err() == nil { // what the node said, not that time ran out
					last = fmt.Errorf("%s: %w", addr, err)
				}
			}
		}
		if len(still) == 0 {
			return nil
		}
		pending = still
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", strings.Join(pending, " "), last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func nodeOK(ctx context.Context, addr string, nodes int) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	info, err := rdb.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	if fields["cluster_state"] != "ok" || fields["cluster_known_nodes"] != strconv.Itoa(nodes) ||
		fields["cluster_slots_ok"] != "16384" {
		return fmt.Errorf("cluster_state:%s cluster_known_nodes:%s cluster_slots_ok:%s",
			fields["cluster_state"], fields["cluster_known_nodes"], fields["cluster_slots_ok"])
	}
	return nil
}

// URL is the cluster's URL in the form statedb.Connect accepts:
// redis+cluster://first?addr=second&addr=third.
func (c *RedisCluster) URL() string {
	addrs := c.Addrs()
	var q []string
	for _, a := range addrs[1:] {
		q = append(q, "addr="+a)
	}
	u := "redis+cluster://" + addrs[0]
	if len(q) > 0 {
		u += "?" + strings.Join(q, "&")
	}
	return u
}

// Addrs are the nodes' host:port, in start order.
func (c *RedisCluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.addr()
	}
	return out
}

// KeysPerNode is DBSIZE of every node: the keys each master holds (a
// replica holds its master's).
func (c *RedisCluster) KeysPerNode(ctx context.Context) (map[string]int64, error) {
	out := make(map[string]int64, len(c.nodes))
	var errs []error
	for _, addr := range c.Addrs() {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		n, err := rdb.DBSize(ctx).Result()
		rdb.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("DBSIZE on %s: %w", addr, err))
			continue
		}
		out[addr] = n
	}
	return out, errors.Join(errs...)
}

// Stop kills every node (SIGKILL: a crash, not a clean shutdown) and waits
// for it to exit.
func (c *RedisCluster) Stop() {
	for _, n := range c.nodes {
		n.kill()
	}
	c.nodes = nil
}

func (n *clusterNode) kill() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.done
}
