package statedb_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/testutil"
)

// Two replicas' limiters over one real Redis share each user's budget:
// a burst of n, then one create per interval, with the wait they advertise
// exact; another user's budget is its own; the key lives exactly until the
// bucket is full again (shorter would hand out a fresh burst early, longer
// keeps an idle user's key).
func TestCreateRateIsFleetWideGCRA(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	clock := time.UnixMilli(1_000_000_000)
	now := func() time.Time { return clock }
	a, err := statedb.NewCreateRate(statedb.NewStore(rdb, "cr:"), 3, time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := statedb.NewCreateRate(statedb.NewStore(rdb, "cr:"), 3, time.Minute, now)
	ctx := context.Background()
	allow := func(l *statedb.CreateRate, user string) (time.Duration, bool) {
		t.Helper()
		wait, ok, err := l.AllowCreate(ctx, user)
		if err != nil {
			t.Fatal(err)
		}
		return wait, ok
	}
	aliceKey := statedb.NewKeys("cr:", 0).CreateRate("alice")
	// Redis counts a key's lifetime on its own clock, which moves on a
	// little between the write and the read.
	wantTTL := func(want time.Duration) {
		t.Helper()
		if ttl := rdb.PTTL(ctx, aliceKey).Val(); ttl <= want-time.Second || ttl > want {
			t.Fatalf("alice's key expires in %s, want %s: when her bucket is full again", ttl, want)
		}
	}
	for i, l := range []*statedb.CreateRate{a, b, a} {
		if _, ok := allow(l, "alice"); !ok {
			t.Fatalf("create %d within the burst refused", i+1)
		}
		wantTTL(time.Duration(i+1) * 20 * time.Second)
	}
	wait, ok := allow(b, "alice")
	if ok || wait != 20*time.Second {
		t.Fatalf("fourth create on the other replica: ok=%v wait=%s, want refused for exactly 20s", ok, wait)
	}
	if _, ok := allow(a, "bob"); !ok {
		t.Fatal("bob shares alice's budget")
	}
	clock = clock.Add(wait - time.Millisecond)
	if _, ok := allow(a, "alice"); ok {
		t.Fatal("allowed before the advertised wait")
	}
	clock = clock.Add(time.Millisecond)
	if _, ok := allow(a, "alice"); !ok {
		t.Fatal("refused after the advertised wait")
	}
	wantTTL(time.Minute)
}

func TestCreateRateRejectsNonRates(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n   int
		per time.Duration
	}{{0, time.Minute}, {-1, time.Minute}, {3, 0}} {
		if _, err := statedb.NewCreateRate(nil, c.n, c.per, nil); err == nil {
			t.Errorf("NewCreateRate(%d, %s) accepted", c.n, c.per)
		}
	}
}
