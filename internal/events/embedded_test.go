package events_test

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/events"
)

// A gateway without redis_url runs on its embedded server (miniredis,
// internal/gateway/embedded.go): the stream commands the bus uses (XADD
// with MAXLEN ~, XTRIM MINID, exclusive XRANGE, XREVRANGE, XREAD BLOCK)
// must work there too, or its event streams would stay silent.
func TestEmbeddedServerServesTheStream(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	b, _ := newBus(t, rdb, events.Config{})
	ctx := context.Background()
	live := follow(t, b, events.Position{}, nil)
	b.Publish(ctx, events.Event{Type: events.Ready, SandboxID: "x"})
	first := next(t, live)
	from, err := events.After(first.ID)
	if err != nil || first.SandboxID != "x" {
		t.Fatalf("first event %+v (%v)", first, err)
	}
	b.Publish(ctx, events.Event{Type: events.Destroyed, SandboxID: "y"})
	if e := next(t, live); e.SandboxID != "y" {
		t.Fatalf("live event %+v", e)
	}
	if got, err := b.Read(ctx, from, nil, 0); err != nil || len(got) != 1 || got[0].SandboxID != "y" {
		t.Fatalf("read after %s: %+v, %v", first.ID, got, err)
	}
	if got, err := b.Recent(ctx, 0); err != nil || len(got) != 2 || got[0].SandboxID != "y" {
		t.Fatalf("recent: %+v, %v", got, err)
	}
}
