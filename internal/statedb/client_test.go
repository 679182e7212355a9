package statedb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/testutil"
)

// failoverBound is how soon after the replica's promotion the Cluster
// client of Connect must reach every key again. go-redis alone kept the
// dead master in its slot map until its 60 s reload (issue 36: reads
// answered 503 state_unavailable for over a minute).
const failoverBound = 3 * time.Second

// A Cluster client of Connect follows a failover: once the killed master's
// replica is promoted, every key is read again within failoverBound.
func TestClusterClientFollowsFailover(t *testing.T) {
	t.Parallel()
	c := testutil.StartRedisClusterWithReplicas(t, 3, 1)
	rdb, err := Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const keys = 200
	if err := testutil.WriteKeys(ctx, rdb, keys); err != nil {
		t.Fatal(err)
	}
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReplicated(ctx, masters); err != nil {
		t.Fatal(err)
	}
	c.Kill(masters[0])
	if err := c.WaitHealthy(ctx, masters[0]); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	deadline := promoted.Add(failoverBound)
	if err := testutil.ReadKeys(ctx, rdb, keys, deadline); err != nil {
		t.Fatalf("%s after the promotion: %v", failoverBound, err)
	}
	t.Logf("every key read again %s after the promotion", time.Since(promoted).Round(time.Millisecond))
}

func TestStaleMapErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err   error
		stale bool
	}{
		{nil, false},
		{redis.Nil, false},
		{context.Canceled, false},
		{fmt.Errorf("read record: %w", context.Canceled), false},
		{fmt.Errorf("dial tcp 127.0.0.1:1: connect: connection refused"), true},
		{context.DeadlineExceeded, true},
	} {
		if got := staleMap(tc.err); got != tc.stale {
			t.Errorf("staleMap(%v) = %v, want %v", tc.err, got, tc.stale)
		}
	}
}
