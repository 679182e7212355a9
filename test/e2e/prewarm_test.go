package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/statedb"
)

// prewarmed lists the fleet's pre-started sandboxes no thread has claimed.
func prewarmed(f *fleet) map[string]backend.Info {
	out := map[string]backend.Info{}
	for _, s := range f.sandboxes() {
		if s.User == "" && s.Labels[backend.LabelPrewarm] != "" {
			out[s.Incarnation] = s
		}
	}
	return out
}

// waitPrewarmed waits for n unclaimed pre-started sandboxes.
func waitPrewarmed(t *testing.T, f *fleet, n int) map[string]backend.Info {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := prewarmed(f)
		if len(got) == n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pre-started sandboxes, want %d", len(got), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// putAll sends each thread's first PUT at once, alternating between the
// gateways, and returns each one's outcome (cold, prewarm, ...).
func putAll(t *testing.T, gateways []*gateway, threads []string) []string {
	t.Helper()
	outcomes := make([]string, len(threads))
	var wg sync.WaitGroup
	for i, thread := range threads {
		wg.Go(func() {
			code, body, _ := call(t, "PUT", gateways[i%len(gateways)].URL+"/threads/"+thread+"/sandbox", nil)
			var v sandboxView
			_ = json.Unmarshal(body, &v)
			if code != 200 {
				t.Errorf("PUT %s: %d %s", thread, code, body)
			}
			outcomes[i] = v.Outcome
		})
	}
	wg.Wait()
	return outcomes
}

// A new thread's first request gets one of the pre-started sandboxes, bound
// to the thread: its id, labels and user data, as if created for it; the
// pool refills; another thread never sees the first one's files.
func TestPrewarmedSandboxIsClaimedByANewThread(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--prewarm", "2", "--max-sandboxes", "0")
	g := f.start()
	pool := waitPrewarmed(t, f, 2)

	code, body, _ := call(t, "PUT", g.URL+"/threads/fresh/sandbox", nil)
	var v sandboxView
	_ = json.Unmarshal(body, &v)
	sid := identity.SandboxID("default", "fresh")
	if code != 200 || v.Outcome != "prewarm" || v.SandboxID != sid {
		t.Fatalf("first PUT of a new thread: %d %s, want outcome prewarm and the thread's id", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, ok, err := f.backend().Discover(ctx, sid)
	if err != nil || !ok {
		t.Fatalf("Discover(%s) = %v %v", sid, ok, err)
	}
	if _, was := pool[info.Incarnation]; !was {
		t.Fatalf("the thread's sandbox %s is not one of the pre-started ones %v: it was created cold", info.Incarnation, pool)
	}
	if info.User != "default" || info.Thread != "fresh" || info.Labels[backend.LabelThread] != "fresh" ||
		info.Labels[backend.LabelSandboxID] != sid || info.Labels[backend.LabelPrewarm] != "" {
		t.Fatalf("claimed sandbox's identity: %+v", info)
	}

	// Its user data is the thread's, both ways.
	if out := shell(t, g.URL, "fresh", "echo mine > /mnt/user-data/workspace/a.txt && pwd").Output; strings.TrimSpace(out) != backend.VirtualWorkspace {
		t.Fatalf("pwd = %q", out)
	}
	host := filepath.Join(backend.ThreadDir(f.dataDir, "default", "fresh"), "workspace", "a.txt")
	if b, err := os.ReadFile(host); err != nil || string(b) != "mine\n" {
		t.Fatalf("file written in the claimed sandbox, on the host at the thread's dir: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(host), "b.txt"), []byte("from host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := shell(t, g.URL, "fresh", "cat /mnt/user-data/workspace/b.txt").Output; out != "from host" {
		t.Fatalf("host file in the claimed sandbox = %q", out)
	}
	if _, err := os.Stat(filepath.Join(f.dataDir, "prewarm", info.Labels[backend.LabelSandboxID])); err == nil {
		t.Fatalf("the claimed sandbox's prewarm dir is still there")
	}

	// The pool is topped up again, without touching the claimed one.
	refilled := waitPrewarmed(t, f, 2)
	if _, again := refilled[info.Incarnation]; again {
		t.Fatalf("the claimed sandbox is offered again")
	}

	// A second new thread gets another sandbox and sees none of the first's files.
	if out := shell(t, g.URL, "other", "ls -A /mnt/user-data/workspace; echo end").Output; out != "end\n" {
		t.Fatalf("another thread's workspace = %q, want empty", out)
	}
	if v := sandboxOf(t, g.URL, "other"); v.SandboxID == sid {
		t.Fatalf("two threads share a sandbox")
	}
}

// A thread that already has files on the host cannot be given a
// pre-started sandbox (its mounts are the pool's empty dirs): it is created
// cold, with its files, and the pre-started ones are left alone.
func TestThreadWithDataIsNotGivenAPrewarmedSandbox(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--prewarm", "1", "--max-sandboxes", "0")
	dir := filepath.Join(backend.ThreadDir(f.dataDir, "default", "old"), "workspace")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	g := f.start()
	pool := waitPrewarmed(t, f, 1)
	code, body, _ := call(t, "PUT", g.URL+"/threads/old/sandbox", nil)
	var v sandboxView
	_ = json.Unmarshal(body, &v)
	if code != 200 || v.Outcome != "cold" {
		t.Fatalf("PUT of a thread with data: %d %s, want a cold create", code, body)
	}
	if out := shell(t, g.URL, "old", "cat /mnt/user-data/workspace/keep.txt").Output; out != "kept" {
		t.Fatalf("the thread's file = %q", out)
	}
	for inc := range pool {
		if _, still := prewarmed(f)[inc]; !still {
			t.Fatalf("pre-started sandbox %s was used or lost", inc)
		}
	}
}

// Threads racing for fewer pre-started sandboxes than there are threads
// each get a sandbox of their own: no pre-started sandbox goes to two.
func TestConcurrentNewThreadsNeverShareAPrewarmedSandbox(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--prewarm", "2", "--max-sandboxes", "0")
	a, b := f.start(), f.start()
	waitPrewarmed(t, f, 2)
	outcomes := putAll(t, []*gateway{a, b}, []string{"racea", "raceb", "racec", "raced"})
	seen := map[string]string{}
	for _, s := range f.sandboxes() {
		if s.Thread == "" {
			continue
		}
		if other, dup := seen[s.Incarnation]; dup {
			t.Fatalf("threads %s and %s share incarnation %s", other, s.Thread, s.Incarnation)
		}
		seen[s.Incarnation] = s.Thread
	}
	if len(seen) != 4 {
		t.Fatalf("%d thread sandboxes, want 4 (outcomes %v)", len(seen), outcomes)
	}
	claimed := 0
	for _, o := range outcomes {
		if o == "prewarm" {
			claimed++
		}
	}
	if claimed == 0 || claimed > 2 {
		t.Fatalf("outcomes %v: want 1 or 2 claims of the 2 pre-started sandboxes", outcomes)
	}
}

// Redis losing the pool's records loses no pre-started sandbox and makes no
// extra one: the reconciler adopts them back into the prewarm index, and a
// new thread still claims one.
func TestReconcilerAdoptsPrewarmedSandboxesBack(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--prewarm", "2", "--max-sandboxes", "0", "--reconcile-interval", "200ms", "--reconcile-grace", "1ms")
	g := f.start()
	before := waitPrewarmed(t, f, 2)
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	index := statedb.NewKeys("", 0).Prewarm()
	for {
		n, err := rdb.ZCard(ctx, index).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("prewarm index has %d after the flush, want the 2 adopted back", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	after := prewarmed(f)
	if len(after) != 2 {
		t.Fatalf("%d pre-started sandboxes after the flush, want the same 2", len(after))
	}
	for inc := range before {
		if _, ok := after[inc]; !ok {
			t.Fatalf("pre-started sandbox %s was replaced instead of adopted", inc)
		}
	}
	code, body, _ := call(t, "PUT", g.URL+"/threads/after-flush/sandbox", nil)
	var v sandboxView
	_ = json.Unmarshal(body, &v)
	if code != 200 || v.Outcome != "prewarm" {
		t.Fatalf("PUT after the flush: %d %s, want a claim", code, body)
	}
}
