package statedb

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/state"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/testutil"
)

// The capability layout 1's code minted for alice's t1 in the fixture.
const fixtureCapability = "3QpYHuXkyXm44hnOADEXEnFTUJxyAF3ROj0pv7ThqEI"

// redisFromFixture starts a redis-server on the state layout 1's code wrote
// (testdata/layout-v1.rdb: alice t1 and t2 active, t1 with a capability
// and an alias, t2 with an egress policy; bob t1 warm with an alias, bob t2
// being destroyed; one pre-started sandbox; carol's create in progress).
func redisFromFixture(t *testing.T) *redis.Client {
	t.Helper()
	_, err := exec.LookPath("redis-server")
	testutil.Require(t, err == nil, "redis-server")
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/layout-v1.rdb")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dump.rdb"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	port := testutil.FreePort(t)
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--dbfilename", "dump.rdb", "--appendonly", "no", "--save", "")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	t.Cleanup(func() { rdb.Close() })
	for i := 0; rdb.Ping(context.Background()).Err() != nil; i++ {
		if i > 200 {
			t.Fatal("redis-server with the fixture did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return rdb
}

// TestMigrateFromLayout1 loads the state today's layout 1 code wrote and
// migrates it: every record, index score, alias, capability and egress
// policy reads back through layout 2, layout 1's keys are gone, the stamp
// makes a second migration a no-op, and another bucket count is refused.
func TestMigrateFromLayout1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redisFromFixture(t)
	if n, _ := rdb.Exists(ctx, "sandgate:{default}:active").Result(); n != 1 {
		t.Fatal("fixture has no layout 1 state")
	}
	s := NewStore(rdb, "")
	now := time.UnixMilli(1_780_000_100_000)
	rep, err := s.Migrate(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Migrated || rep.Records != 5 || rep.Aliases != 2 || rep.Egress != 1 {
		t.Fatalf("report %+v, want 5 records, 2 aliases, 1 egress policy", rep)
	}
	a1, a2 := identity.SandboxID("alice", "t1"), identity.SandboxID("alice", "t2")
	w1, d1 := identity.SandboxID("bob", "t1"), identity.SandboxID("bob", "t2")
	for sid, want := range map[string]state.State{a1: state.StateActive, a2: state.StateActive, w1: state.StateWarm, d1: state.StateDestroying,
		"pw-0123456789ab": state.StatePrewarm} {
		rec, ok, err := s.Get(ctx, sid)
		if err != nil || !ok || rec.State != want || rec.Incarnation == "" {
			t.Fatalf("%s after migration: %+v %v %v, want state %s", sid, rec, ok, err, want)
		}
	}
	if c, _ := s.Count(ctx); c != (state.Counts{Active: 2, Warm: 1, Prewarm: 1}) {
		t.Fatalf("counts %+v", c)
	}
	// Activity scores carried over: alice's t1 was last active at the fixture's t0.
	t0 := time.UnixMilli(1_780_000_000_000)
	if ids, _ := s.Expired(ctx, s.keys.Bucket(a1), state.IndexActive, t0, 10); len(ids) != 1 || ids[0] != a1 {
		t.Fatalf("a1's activity score not carried over: %v", ids)
	}
	if sid, ok, _ := s.Alias(ctx, "alice", "deerflow-a1"); !ok || sid != a1 {
		t.Fatalf("alias: %q %v", sid, ok)
	}
	if rec, ok, err := s.ByCapability(ctx, state.SumCapability(fixtureCapability)); err != nil || !ok || rec.SandboxID != a1 {
		t.Fatalf("capability: %+v %v %v", rec, ok, err)
	}
	if e, ok, _ := s.Egress(ctx, a2); !ok || e.Mode != backend.EgressProxy || len(e.Allow) != 1 {
		t.Fatalf("egress: %+v %v", e, ok)
	}
	// The thread with its own egress policy is still never offered a pre-started sandbox.
	res, err := s.Reserve(ctx, state.ReserveRequest{SandboxID: a2, User: "alice", Max: 10, Kind: state.KindTake, Now: now, Deadline: now.Add(time.Minute)})
	if err != nil || res.Outcome != "ok" {
		t.Fatalf("claim for a2: %+v %v", res, err)
	}
	// Every held sandbox counts for its user; the destroying one does not.
	if n, _ := rdb.ZCount(ctx, s.keys.User("alice"), heldScore, "+inf").Result(); n != 2 {
		t.Fatalf("alice holds %d, want 2", n)
	}
	if left, _ := s.scan(ctx, "sandgate:{default}:*"); len(left) != 0 {
		t.Fatalf("layout 1 keys left: %v", left)
	}
	// Nothing left for the reconciler to repair but the destroy it finishes.
	all := make([]int, s.keys.Buckets())
	for b := range all {
		all[b] = b
	}
	if bad, err := s.Inconsistent(ctx, all, now, time.Minute); err != nil || len(bad) != 0 {
		t.Fatalf("inconsistent after migration: %v %v", bad, err)
	}
	if rep, err := s.Migrate(ctx, now); err != nil || rep.Migrated {
		t.Fatalf("second migration: %+v %v", rep, err)
	}
	if _, err := NewStoreBuckets(rdb, "", 16).Migrate(ctx, now); !errors.Is(err, ErrLayout) {
		t.Fatalf("another bucket count: %v, want ErrLayout", err)
	}
}
