package events_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/testutil"
)

const stream = "t{fleet}:events"

// newBus starts a bus (one replica) whose Run ends with the returned stop,
// or with the test.
func newBus(t *testing.T, rdb redis.UniversalClient, cfg events.Config) (*events.Bus, context.CancelFunc) {
	t.Helper()
	if cfg.Stream == "" {
		cfg.Stream = stream
	}
	b, err := events.New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	wait, cancelWait := context.WithTimeout(ctx, 5*time.Second)
	defer cancelWait()
	if err := b.Ready(wait); err != nil {
		t.Fatalf("bus never read the stream: %v", err)
	}
	return b, stop
}

func client(t *testing.T) redis.UniversalClient {
	t.Helper()
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func next(t *testing.T, ch <-chan events.Event) events.Event {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("follow channel closed")
		}
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
		return events.Event{}
	}
}

func follow(t *testing.T, b *events.Bus, from events.Position, match func(events.Event) bool) <-chan events.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := b.Follow(ctx, from, match)
	t.Cleanup(func() {
		cancel()
		for range ch { // the follower's goroutine ends
		}
	})
	return ch
}

// Replica A publishes and dies; its follower reconnects to replica B with
// the last id it saw and gets exactly the rest, then B's live events: on
// a single Redis and on a Redis Cluster, where the stream lives in the
// fleet's slot.
func TestFollowerResumesOnAnotherReplicaAfterOneDied(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{
		{"redis", client},
		{"cluster", func(t *testing.T) redis.UniversalClient {
			c := testutil.StartRedisCluster(t, 3)
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
			t.Cleanup(func() { rdb.Close() })
			return rdb
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := tc.rdb(t)
			ctx := context.Background()
			a, killA := newBus(t, rdb, events.Config{Replica: "a"})
			onA := follow(t, a, events.Position{}, func(e events.Event) bool { return e.Thread == "t1" })
			for i := range 5 {
				a.Publish(ctx, events.Event{Type: events.Starting, Thread: "t1", SandboxID: fmt.Sprint("s", i), Cause: "cold"})
				a.Publish(ctx, events.Event{Type: events.Ready, Thread: "other"})
			}
			seen := []events.Event{next(t, onA), next(t, onA)}
			killA()

			b, _ := newBus(t, rdb, events.Config{Replica: "b"})
			from, err := events.After(seen[1].ID)
			if err != nil {
				t.Fatalf("event id %q: %v", seen[1].ID, err)
			}
			onB := follow(t, b, from, func(e events.Event) bool { return e.Thread == "t1" })
			for i := 2; i < 5; i++ {
				e := next(t, onB)
				if e.SandboxID != fmt.Sprint("s", i) || e.Replica != "a" || e.Cause != "cold" || e.Time.IsZero() {
					t.Fatalf("replayed event %d = %+v", i, e)
				}
			}
			b.Publish(ctx, events.Event{Type: events.Destroyed, Thread: "t1", SandboxID: "s9", Cause: "idle"})
			if e := next(t, onB); e.SandboxID != "s9" || e.Replica != "b" {
				t.Fatalf("live event after the replay = %+v", e)
			}
			select {
			case e := <-onB:
				t.Fatalf("extra event %+v", e)
			case <-time.After(200 * time.Millisecond):
			}
		})
	}
}

// ?since= a time replays the events the stream received from then on, and
// only those.
func TestReadSinceTime(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	b, _ := newBus(t, rdb, events.Config{})
	ctx := context.Background()
	b.Publish(ctx, events.Event{Type: events.Starting, SandboxID: "before"})
	time.Sleep(20 * time.Millisecond)
	mark := time.Now()
	b.Publish(ctx, events.Event{Type: events.Ready, SandboxID: "after1"})
	b.Publish(ctx, events.Event{Type: events.Destroyed, SandboxID: "after2"})
	from, err := events.ParsePosition(mark.UTC().Format(time.RFC3339Nano))
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Read(ctx, from, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].SandboxID != "after1" || got[1].SandboxID != "after2" {
		t.Fatalf("since %s: %+v", mark, got)
	}
	if got, _ := b.Read(ctx, from, nil, 1); len(got) != 1 {
		t.Fatalf("limit 1 read %d", len(got))
	}
}

// The stream keeps neither events older than the retention nor more than
// about MaxLen of them.
func TestRetentionAndLengthTrim(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	ctx := context.Background()
	// Small nodes, so the approximate MAXLEN trim can act on a short stream.
	if err := rdb.ConfigSet(ctx, "stream-node-max-entries", "2").Err(); err != nil {
		t.Fatal(err)
	}
	old, _ := newBus(t, rdb, events.Config{Stream: "r{fleet}:events", Retention: 500 * time.Millisecond})
	for range 3 {
		old.Publish(ctx, events.Event{Type: events.Starting, SandboxID: "old"})
	}
	time.Sleep(600 * time.Millisecond)
	old.Publish(ctx, events.Event{Type: events.Ready, SandboxID: "new"})
	got, err := old.Read(ctx, events.Position{}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].SandboxID != "new" {
		t.Fatalf("after the retention the stream holds %+v, want only the new event", got)
	}

	short, _ := newBus(t, rdb, events.Config{Stream: "m{fleet}:events", MaxLen: 4})
	for range 30 {
		short.Publish(ctx, events.Event{Type: events.Starting})
	}
	if n, _ := rdb.XLen(ctx, "m{fleet}:events").Result(); n < 4 || n > 6 {
		t.Fatalf("stream of MaxLen 4 holds %d", n)
	}
}

// A follower that never reads costs the publishers and the other
// followers nothing; when it does read, it gets every event, in order,
// from the stream.
func TestSlowFollowerBlocksNoOneAndMissesNothing(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	b, _ := newBus(t, rdb, events.Config{Buffer: 2})
	slow := follow(t, b, events.Position{}, nil)
	fast := follow(t, b, events.Position{}, nil)
	ctx := context.Background()
	const n = 50
	start := time.Now()
	for i := range n {
		b.Publish(ctx, events.Event{Type: events.Starting, SandboxID: fmt.Sprint(i)})
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("publishing %d events with a stuck follower took %s", n, d)
	}
	for i := range n {
		if e := next(t, fast); e.SandboxID != fmt.Sprint(i) {
			t.Fatalf("fast follower's event %d = %s", i, e.SandboxID)
		}
	}
	if b.Lagged() == 0 {
		t.Fatal("the stuck follower never lagged: the test proves nothing")
	}
	for i := range n {
		if e := next(t, slow); e.SandboxID != fmt.Sprint(i) {
			t.Fatalf("slow follower's event %d = %s", i, e.SandboxID)
		}
	}
}

func TestParsePosition(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want string
		err  bool
	}{
		{"1733500000000-3", "1733500000000-3", false},
		{"2026-12-06T10:00:00Z", "1796551199999-18446744073709551615", false},
		{"", "", true},
		{"12", "", true},
		{"a-1", "", true},
		{"1-", "", true},
		{"yesterday", "", true},
	} {
		p, err := events.ParsePosition(tc.in)
		if tc.err {
			if !errors.Is(err, events.ErrBadPosition) {
				t.Errorf("ParsePosition(%q) = %v, %v; want ErrBadPosition", tc.in, p, err)
			}
			continue
		}
		if err != nil || p.String() != tc.want {
			t.Errorf("ParsePosition(%q) = %v, %v; want %s", tc.in, p, err, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []events.Config{{}, {Stream: "s", MaxLen: -1}, {Stream: "s", Retention: -time.Second}, {Stream: "s", Buffer: -1}} {
		if _, err := events.New(nil, c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}
