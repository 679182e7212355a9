package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/testutil"
)

// A gateway started on a Redis holding layout 1 state (written by layout
// 1's code: internal/statedb/testdata) migrates it before it reports ready:
// the stamp is written, layout 1's keys are gone, the records, the alias
// and the pre-started sandbox read back through layout 2's keys.
func TestGatewayMigratesLayout1StateAtStart(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--reconcile-interval", "0", "--prewarm", "0")
	f.redis.Restore(filepath.Join(testutil.ModuleRoot(), "internal", "statedb", "testdata", "layout-v1.rdb"))
	g := f.start()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(g.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after the migration:\n%s", g.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(g.logs.String(), `"msg":"redis key layout migrated from layout 1","records":5,"aliases":2,"egress":1`) {
		t.Fatalf("no migration logged:\n%s", g.logs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	keys := statedb.NewKeys("", 0)
	if v, err := rdb.Get(ctx, keys.Layout()).Result(); err != nil || v != "2 64" {
		t.Fatalf("layout stamp %q %v", v, err)
	}
	if old, _ := rdb.Keys(ctx, "sandgate:{default}:*").Result(); len(old) != 0 {
		t.Fatalf("layout 1 keys left: %v", old)
	}
	a1 := identity.SandboxID("alice", "t1")
	if st, _ := rdb.HGet(ctx, keys.Sandbox(a1), "state").Result(); st != "active" {
		t.Fatalf("alice's t1 migrated as %q", st)
	}
	if sid, _ := rdb.HGet(ctx, keys.Aliases("alice"), "deerflow-a1").Result(); sid != a1 {
		t.Fatalf("alice's alias names %q", sid)
	}
	if n, _ := rdb.ZCard(ctx, keys.Prewarm()).Result(); n != 1 {
		t.Fatalf("%d pre-started sandboxes indexed, want 1", n)
	}
}
