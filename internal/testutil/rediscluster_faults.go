package testutil

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Faults a test inflicts on a RedisCluster: a master killed, a node paused
// past the node timeout, a slot range moved between masters. Each returns
// once the fault is in place; WaitHealthy waits for the cluster to heal.

// ClusterNode is one node as CLUSTER NODES describes it.
type ClusterNode struct {
	ID, Addr string
	Master   bool   // a master (failed or not)
	Failed   bool   // flagged fail (or fail?: suspected)
	MasterID string // a replica's master
	Slots    int    // slots a master serves
}

// Nodes is the cluster's view of its nodes, asked of a live node.
func (c *RedisCluster) Nodes(ctx context.Context) ([]ClusterNode, error) {
	var last error
	for _, addr := range c.liveAddrs() {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		text, err := rdb.ClusterNodes(ctx).Result()
		rdb.Close()
		if err != nil {
			last = err
			continue
		}
		return parseClusterNodes(text), nil
	}
	return nil, fmt.Errorf("CLUSTER NODES on no live node: %w", last)
}

func parseClusterNodes(text string) []ClusterNode {
	var out []ClusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := ClusterNode{ID: f[0], Addr: addr, Failed: strings.Contains(f[2], "fail")}
		if n.Master = strings.Contains(f[2], "master"); !n.Master {
			n.MasterID = f[3]
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") { // a slot being imported or migrated
				continue
			}
			lo, hi, ranged := strings.Cut(r, "-")
			a, _ := strconv.Atoi(lo)
			b := a
			if ranged {
				b, _ = strconv.Atoi(hi)
			}
			n.Slots += b - a + 1
		}
		out = append(out, n)
	}
	return out
}

// Masters are the addresses of the masters that serve slots and are not
// flagged failed, in start order.
func (c *RedisCluster) Masters(ctx context.Context) ([]string, error) {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	serving := map[string]bool{}
	for _, n := range nodes {
		if n.Master && !n.Failed && n.Slots > 0 {
			serving[n.Addr] = true
		}
	}
	var out []string
	for _, addr := range c.Addrs() {
		if serving[addr] {
			out = append(out, addr)
		}
	}
	return out, nil
}

// WaitReplicated returns once every master's writes so far have reached
// one replica (WAIT 1): replication is asynchronous, so a test that kills
// a master right after writing would measure Redis's own loss window.
func (c *RedisCluster) WaitReplicated(ctx context.Context, masters []string) error {
	for _, m := range masters {
		one := redis.NewClient(&redis.Options{Addr: m})
		acked, err := one.Do(ctx, "WAIT", 1, 2000).Int()
		one.Close()
		if err != nil || acked != 1 {
			return fmt.Errorf("WAIT on %s: %d replicas, %v", m, acked, err)
		}
	}
	return nil
}

// Kill SIGKILLs the node at addr (a crash: nothing is flushed).
func (c *RedisCluster) Kill(addr string) {
	c.t.Helper()
	c.node(addr).kill()
}

// Restart starts the node at addr, killed by Kill, again on its ports with
// its nodes file, as a crashed node's supervisor would: it rejoins as the
// node it was, empty (no persistence), and a replica resyncs from its master
// (a killed master whose replica was promoted comes back as a replica).
// It returns once the node answers; WaitHealthy waits for the resync.
func (c *RedisCluster) Restart(addr string) error {
	c.t.Helper()
	n := c.node(addr)
	select {
	case <-n.done:
	default:
		return fmt.Errorf("restart %s: still running", addr)
	}
	if err := c.launch(n); err != nil {
		return err
	}
	if err := n.waitUp(); err != nil {
		n.kill()
		return err
	}
	return nil
}

// Pause SIGSTOPs the node at addr: its sockets stay open and nothing
// answers, as a node cut off by a partition looks to the others.
func (c *RedisCluster) Pause(addr string) {
	c.t.Helper()
	n := c.node(addr)
	if err := n.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("SIGSTOP %s: %v", addr, err)
	}
	n.paused = true
}

// Resume SIGCONTs a node Pause stopped.
func (c *RedisCluster) Resume(addr string) {
	c.t.Helper()
	n := c.node(addr)
	if err := n.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		c.t.Fatalf("SIGCONT %s: %v", addr, err)
	}
	n.paused = false
}

// WaitHealthy waits until every live node says cluster_state:ok with every
// slot served and none of the addresses in gone is a serving master (its
// replica was promoted): the cluster healed from a fault on them.
func (c *RedisCluster) WaitHealthy(ctx context.Context, gone ...string) error {
	for {
		// One look at a time, so that the error says what was seen last.
		look, cancel := context.WithTimeout(ctx, time.Second)
		err := c.waitOK(look)
		cancel()
		if err == nil {
			var masters []string
			if masters, err = c.Masters(ctx); err == nil {
				err = stillMaster(masters, gone)
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster not healed: %w\n%s", err, c.nodeLogs())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// nodeLogs is the last lines of every node's log.
func (c *RedisCluster) nodeLogs() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "redis-server %s:\n%s\n", n.addr(), tailString(n.logs.String(), 8))
	}
	return b.String()
}

func stillMaster(masters, gone []string) error {
	for _, m := range masters {
		for _, g := range gone {
			if m == g {
				return fmt.Errorf("%s still serves its slots as a master", g)
			}
		}
	}
	return nil
}

// MigrateSlots moves the slots first..last (and their keys) from the master
// at from to the master at to the way redis-cli --cluster reshard does,
// slot by slot: the target IMPORTING, the source MIGRATING, the keys moved
// with MIGRATE (clients meanwhile get ASK for keys already moved, then
// MOVED once the slot is the target's). It returns the number of keys
// moved.
func (c *RedisCluster) MigrateSlots(ctx context.Context, from, to string, first, last int) (int, error) {
	src := redis.NewClient(&redis.Options{Addr: from, MaxRetries: -1})
	defer src.Close()
	dst := redis.NewClient(&redis.Options{Addr: to, MaxRetries: -1})
	defer dst.Close()
	srcID, err := src.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return 0, fmt.Errorf("CLUSTER MYID on %s: %w", from, err)
	}
	dstID, err := dst.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return 0, fmt.Errorf("CLUSTER MYID on %s: %w", to, err)
	}
	host, port, _ := net.SplitHostPort(to)
	moved := 0
	for slot := first; slot <= last; slot++ {
		if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
			return moved, fmt.Errorf("slot %d IMPORTING on %s: %w", slot, to, err)
		}
		if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
			return moved, fmt.Errorf("slot %d MIGRATING on %s: %w", slot, from, err)
		}
		for {
			keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
			if err != nil {
				return moved, fmt.Errorf("GETKEYSINSLOT %d: %w", slot, err)
			}
			if len(keys) == 0 {
				break
			}
			args := []any{"MIGRATE", host, port, "", 0, 5000, "REPLACE", "KEYS"}
			for _, k := range keys {
				args = append(args, k)
			}
			if err := src.Do(ctx, args...).Err(); err != nil {
				return moved, fmt.Errorf("MIGRATE slot %d: %w", slot, err)
			}
			moved += len(keys)
		}
		// The target first, then the source, as redis-cli does: the slot
		// is never owned by no one in between.
		for _, rdb := range []*redis.Client{dst, src} {
			if err := rdb.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err(); err != nil {
				return moved, fmt.Errorf("slot %d NODE: %w", slot, err)
			}
		}
	}
	return moved, nil
}

// SlotsOf is the first and last slot of the first slot range the master at
// addr serves.
func (c *RedisCluster) SlotsOf(ctx context.Context, addr string) (first, last int, err error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return 0, 0, err
	}
	for _, s := range slots {
		if len(s.Nodes) > 0 && s.Nodes[0].Addr == addr {
			return int(s.Start), int(s.End), nil
		}
	}
	return 0, 0, fmt.Errorf("%s serves no slot", addr)
}

// WaitSynced waits until every replica finished its sync with its master:
// a replica restarted empty, or a master that came back as one, can take
// over again only then.
func (c *RedisCluster) WaitSynced(ctx context.Context) error { return c.waitReplicasLinked(ctx) }

// waitReplicasLinked waits until every replica finished its first sync
// with its master (master_link_status:up): before that a killed master's
// replica has nothing to take over with.
func (c *RedisCluster) waitReplicasLinked(ctx context.Context) error {
	for {
		nodes, err := c.Nodes(ctx)
		pending := 0
		replicas := map[string]int{} // master id -> replicas
		for _, n := range nodes {
			if !n.Master {
				replicas[n.MasterID]++
			}
		}
		for _, n := range nodes {
			// A replica is linked, and its master counts it online (WAIT
			// counts only those).
			want := "master_link_status:up"
			if n.Master {
				want = fmt.Sprintf("connected_slaves:%d", replicas[n.ID])
			}
			rdb := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
			info, ierr := rdb.Info(ctx, "replication").Result()
			rdb.Close()
			if ierr != nil || !strings.Contains(info, want) ||
				strings.Count(info, "state=online") != strings.Count(info, "state=") {
				pending++
				err = fmt.Errorf("%s: no %s (%v)", n.Addr, want, ierr)
			}
		}
		if err == nil && pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *RedisCluster) node(addr string) *clusterNode {
	c.t.Helper()
	for _, n := range c.nodes {
		if n.addr() == addr {
			return n
		}
	}
	c.t.Fatalf("no cluster node at %s", addr)
	return nil
}

// liveAddrs are the nodes neither killed nor paused.
func (c *RedisCluster) liveAddrs() []string {
	var out []string
	for _, n := range c.nodes {
		select {
		case <-n.done:
			continue
		default:
		}
		if !n.paused {
			out = append(out, n.addr())
		}
	}
	return out
}

// WriteKeys sets k:0 … k:{n-1} to their numbers, for a fault test to read
// back with ReadKeys.
func WriteKeys(ctx context.Context, rdb redis.UniversalClient, n int) error {
	for i := range n {
		if err := rdb.Set(ctx, fmt.Sprintf("k:%d", i), i, 0).Err(); err != nil {
			return err
		}
	}
	return nil
}

// ReadKeys reads k:0 … k:{n-1} back, retrying each until deadline: a
// client may fail a read or two before its slot map follows a fault.
func ReadKeys(ctx context.Context, rdb redis.UniversalClient, n int, deadline time.Time) error {
	for i := range n {
		for {
			v, err := rdb.Get(ctx, fmt.Sprintf("k:%d", i)).Int()
			if err == nil && v == i {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("k:%d = %d, %v", i, v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}
