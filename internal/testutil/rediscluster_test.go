package testutil_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/testutil"
)

// The cluster StartRedisCluster returns is usable through the URL the
// gateway takes (statedb.Connect makes a cluster client of it), and
// KeysPerNode counts what each master holds: keys of 300 different slots
// land on every node, keys of one hash tag on one.
func TestRedisClusterServesTheGatewaysURL(t *testing.T) {
	c := testutil.StartRedisCluster(t, 3)
	u := c.URL()
	if want := "redis+cluster://" + c.Addrs()[0] + "?addr=" + c.Addrs()[1] + "&addr=" + c.Addrs()[2]; u != want {
		t.Fatalf("URL() = %q, want %q", u, want)
	}
	rdb, err := statedb.Connect(u)
	if err != nil {
		t.Fatalf("statedb.Connect(%q): %v", u, err)
	}
	defer rdb.Close()
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("statedb.Connect(%q) made a %T, not a cluster client", u, rdb)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const spread, tagged = 300, 50
	for i := range spread {
		if err := rdb.Set(ctx, fmt.Sprintf("spread:%d", i), "x", 0).Err(); err != nil {
			t.Fatalf("SET through the cluster client: %v", err)
		}
	}
	for i := range tagged {
		if err := rdb.Set(ctx, fmt.Sprintf("{one}:%d", i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	per, err := c.KeysPerNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	var counts []string
	for _, addr := range c.Addrs() {
		total += per[addr]
		counts = append(counts, fmt.Sprintf("%s=%d", addr, per[addr]))
		if per[addr] < spread/10 {
			t.Errorf("node %s holds %d keys of %d spread over all slots", addr, per[addr], spread)
		}
	}
	if total != spread+tagged {
		t.Fatalf("KeysPerNode sums to %d, want %d: %s", total, spread+tagged, strings.Join(counts, " "))
	}
	t.Logf("keys per node: %s", strings.Join(counts, " "))
}

// With replicas, a master SIGKILLed is replaced by its replica (WaitHealthy
// returns once it is promoted and every slot is served), a paused master
// likewise, and MigrateSlots moves a slot range with its keys: every key
// written before stays readable through the gateway's client.
func TestRedisClusterWithReplicasHealsFromFaults(t *testing.T) {
	c := testutil.StartRedisClusterWithReplicas(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	masters, err := c.Masters(ctx)
	if err != nil || len(masters) != 3 {
		t.Fatalf("masters %v, %v; want 3", masters, err)
	}
	rdb, err := statedb.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	const keys = 300
	if err := testutil.WriteKeys(ctx, rdb, keys); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReplicated(ctx, masters); err != nil {
		t.Fatal(err)
	}
	// The client may fail a read or two before its slot map follows.
	readAll := func(when string) {
		t.Helper()
		if err := testutil.ReadKeys(ctx, rdb, keys, time.Now().Add(10*time.Second)); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}

	began := time.Now()
	c.Kill(masters[0])
	if err := c.WaitHealthy(ctx, masters[0]); err != nil {
		t.Fatal(err)
	}
	t.Logf("master killed: replica promoted, cluster_state:ok in %s", time.Since(began).Round(time.Millisecond))
	readAll("after the kill")

	began = time.Now()
	c.Pause(masters[1])
	if err := c.WaitHealthy(ctx, masters[1]); err != nil {
		t.Fatal(err)
	}
	c.Resume(masters[1])
	t.Logf("master paused: replica promoted in %s", time.Since(began).Round(time.Millisecond))
	readAll("after the pause")

	first, _, err := c.SlotsOf(ctx, masters[2])
	if err != nil {
		t.Fatal(err)
	}
	now, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dst := now[0]
	if dst == masters[2] {
		dst = now[1]
	}
	moved, err := c.MigrateSlots(ctx, masters[2], dst, first, first+199)
	if err != nil {
		t.Fatal(err)
	}
	if moved == 0 {
		t.Fatalf("200 slots of %d keys moved no key", keys)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	readAll("after the migration")
}
