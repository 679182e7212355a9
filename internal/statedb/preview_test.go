package statedb_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/testutil"
)

// The fleet's first key is created once, whichever replica asks first; a
// rotation adds a key that becomes current while the old one keeps its
// secret and verifies until maxTTL after the rotation, then is dropped.
func TestPreviewKeysRotate(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	a, b := statedb.NewStore(rdb, "pk:"), statedb.NewStore(rdb, "pk:")
	now := time.Unix(1_800_000_000, 0)
	first, err := a.PreviewKeys(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.PreviewKeys(ctx, now)
	if err != nil || first.Current != 1 || len(first.Secrets[1]) != 32 || !bytes.Equal(again.Secrets[1], first.Secrets[1]) {
		t.Fatalf("first key: %+v / %+v %v, want one shared 32-byte key 1", first, again, err)
	}
	id, err := b.RotatePreviewKey(ctx, now, time.Hour)
	if err != nil || id != 2 {
		t.Fatalf("rotate: %d %v", id, err)
	}
	set, err := a.PreviewKeys(ctx, now.Add(time.Hour))
	if err != nil || set.Current != 2 || !bytes.Equal(set.Secrets[1], first.Secrets[1]) || len(set.Secrets[2]) != 32 {
		t.Fatalf("after the rotation: %+v %v, want key 2 current and key 1 unchanged", set, err)
	}
	if set, _ := a.PreviewKeys(ctx, now.Add(time.Hour+2*time.Second)); set.Secrets[1] != nil || set.Secrets[2] == nil {
		t.Errorf("past max ttl: %+v, want key 1 retired", set)
	}
}
