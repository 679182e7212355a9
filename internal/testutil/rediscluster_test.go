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
