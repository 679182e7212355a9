package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/testutil"
)

func newBus(t *testing.T, rdb redis.UniversalClient, replica string, keep int) *events.Bus {
	t.Helper()
	b, err := events.New(rdb, events.Config{Channel: "t:events", RecentKey: "t:events:recent", Keep: keep, Replica: replica, Buffer: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go b.Run(ctx)
	wait, cancelWait := context.WithTimeout(ctx, 5*time.Second)
	defer cancelWait()
	if err := b.Ready(wait); err != nil {
		t.Fatalf("bus never subscribed: %v", err)
	}
	return b
}

func next(t *testing.T, ch <-chan events.Event) events.Event {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
		return events.Event{}
	}
}

// Two replicas on one real Redis: what one publishes, the other's watcher
// sees (filtered), and the recent list keeps the newest, bounded.
func TestEventsCrossReplicasAndRecentIsBounded(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	a := newBus(t, rdb, "a", 3)
	b := newBus(t, rdb, "b", 3)

	onlyT1, stop := b.Watch(func(e events.Event) bool { return e.Thread == "t1" })
	defer stop()
	all, stopAll := b.Watch(nil)
	defer stopAll()

	ctx := context.Background()
	a.Publish(ctx, events.Event{Type: events.Starting, Thread: "t2", SandboxID: "s2"})
	a.Publish(ctx, events.Event{Type: events.Ready, Thread: "t1", SandboxID: "s1"})
	if e := next(t, onlyT1); e.Type != events.Ready || e.SandboxID != "s1" || e.Replica != "a" || e.Time.IsZero() {
		t.Fatalf("watcher of t1 got %+v", e)
	}
	if e := next(t, all); e.Thread != "t2" {
		t.Fatalf("first event of all = %+v, want t2's", e)
	}

	for i := 0; i < 3; i++ {
		a.Publish(ctx, events.Event{Type: events.Destroyed, SandboxID: "x"})
	}
	recent, err := b.Recent(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recent) != 3 || recent[0].Type != events.Destroyed {
		t.Fatalf("recent = %+v, want the 3 newest, newest first", recent)
	}
	if n, _ := rdb.LLen(ctx, "t:events:recent").Result(); n != 3 {
		t.Fatalf("recent list holds %d, want 3", n)
	}
}

// A watcher that never reads costs the publisher nothing: the bus drops
// for it and counts, and the other watchers still get everything.
func TestLaggingWatcherDropsInsteadOfBlocking(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	b := newBus(t, rdb, "a", 0)
	_, stopStuck := b.Watch(nil) // never read
	defer stopStuck()
	live, stop := b.Watch(nil)
	defer stop()
	for i := 0; i < 5; i++ {
		b.Publish(context.Background(), events.Event{Type: events.Starting})
		next(t, live)
	}
	if b.Dropped() != 3 {
		t.Fatalf("dropped %d, want 3 (5 events, buffer 2)", b.Dropped())
	}
	stop()
	if _, open := <-live; open {
		t.Fatal("stop left the channel open")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []events.Config{{}, {Channel: "c"}, {Channel: "c", RecentKey: "r", Keep: -1}} {
		if _, err := events.New(nil, c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}
