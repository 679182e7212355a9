package webhook

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/testutil"
	"github.com/sandgate/sandgate/internal/webhook/webhooktest"
)

// On a Redis Cluster every key is in the fleet's slot: the group reads,
// the transaction of Create and the scripts (several keys each) run there
// as on one server.
func TestClusterDelivers(t *testing.T) {
	t.Parallel()
	c := testutil.StartRedisCluster(t, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer rdb.Close()
	deliverFive(t, rdb)
}

// A gateway without redis_url runs on its embedded server (miniredis): the
// group commands and the scripts (XREADGROUP, XAUTOCLAIM, XPENDING,
// XCLAIM, XACK in Lua) must work there too, or its webhooks would stay
// silent.
func TestEmbeddedServerDelivers(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	deliverFive(t, rdb)
}

// deliverFive delivers five events after the receiver refused them a
// while, to a configured endpoint and one the API registered, and checks
// the stats and that a deletion takes.
func deliverFive(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	secret := NewSecret()
	rcv := webhooktest.New(secret)
	defer rcv.Close()
	s, err := New(rdb, fast(Config{Endpoints: []Endpoint{{ID: "e", URL: rcv.URL(), Secret: secret}}}), loopback(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run(t, s)
	api := webhooktest.New(secret)
	defer api.Close()
	ep, err := s.Create(ctx, Endpoint{URL: api.URL(), Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "groups created", 5*time.Second, func() bool {
		g, _ := rdb.XInfoGroups(ctx, testKeys.Stream).Result()
		return len(g) == 2
	})
	rcv.Fail(true)
	publish(t, rdb, 5, events.Ready)
	waitFor(t, "refused attempts", 5*time.Second, func() bool { return rcv.Counts().Refused >= 5 })
	rcv.Fail(false)
	// A delivery is counted once its answer is back: after the receiver
	// has the event.
	waitFor(t, "5 events delivered and counted", 10*time.Second, func() bool {
		v, err := s.List(ctx)
		return rcv.Counts().Events == 5 && api.Counts().Events == 5 && err == nil && len(v) == 2 &&
			v[0].Stats.Delivered == 5 && v[1].Stats.Delivered == 5
	})
	if v, err := s.List(ctx); err != nil || len(v) != 2 || v[0].Stats.Delivered != 5 || v[1].Stats.Delivered != 5 || v[0].Stats.Failed < 5 {
		t.Fatalf("stats %+v, %v", v, err)
	}
	if err := s.Delete(ctx, ep.ID); err != nil {
		t.Fatal(err)
	}
	if g, _ := rdb.XInfoGroups(ctx, testKeys.Stream).Result(); len(g) != 1 {
		t.Fatalf("groups after the delete: %+v", g)
	}
}
