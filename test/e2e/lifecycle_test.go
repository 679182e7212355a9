package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sandgate/sandgate/internal/identity"
)

func incarnations(f *fleet) []string {
	var out []string
	for _, s := range f.sandboxes() {
		out = append(out, s.SandboxID+"/"+s.Incarnation)
	}
	sort.Strings(out)
	return out
}

func TestReleaseParksWarmAndReclaims(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	shell(t, g.URL, "parked", "echo x > /mnt/user-data/workspace/x")
	before := incarnations(f)
	if code, body, _ := call(t, "DELETE", g.URL+"/threads/parked/sandbox", nil); code != 204 {
		t.Fatalf("release: %d %s", code, body)
	}
	if v := sandboxOf(t, g.URL, "parked"); v.State != "warm" {
		t.Fatalf("after release: %+v", v)
	}
	code, body, _ := call(t, "PUT", g.URL+"/threads/parked/sandbox", nil)
	var v sandboxView
	_ = json.Unmarshal(body, &v)
	if code != 200 || v.Outcome != "warm" || v.State != "active" {
		t.Fatalf("reclaim: %d %s", code, body)
	}
	if after := incarnations(f); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("reclaim replaced the sandbox: %v -> %v", before, after)
	}
	if code, _, _ := call(t, "DELETE", g.URL+"/threads/parked/sandbox?destroy=true", nil); code != 204 {
		t.Fatalf("destroy: %d", code)
	}
	if n := len(f.sandboxes()); n != 0 {
		t.Fatalf("%d sandboxes after destroy", n)
	}
	if code, body, _ := call(t, "GET", g.URL+"/threads/parked/sandbox", nil); code != 404 || errorCode(t, body) != "not_found" {
		t.Fatalf("GET after destroy: %d %s", code, body)
	}
	if code, _, _ := call(t, "DELETE", g.URL+"/threads/parked/sandbox?destroy=maybe", nil); code != 400 {
		t.Fatalf("bad destroy flag: %d", code)
	}
}

func TestRedisFlushThenTrafficKeepsEverySandbox(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--max-sandboxes", "0")
	a := f.start()
	for _, th := range []string{"r1", "r2", "r3"} {
		shell(t, a.URL, th, "echo "+th+" > /mnt/user-data/workspace/id")
	}
	before := incarnations(f)
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	b := f.start() // no cache: every thread goes through Redis, which has forgotten everything
	for _, th := range []string{"r1", "r2", "r3"} {
		if d := shell(t, b.URL, th, "cat /mnt/user-data/workspace/id"); strings.TrimSpace(d.Output) != th {
			t.Fatalf("%s: %+v", th, d)
		}
	}
	if after := incarnations(f); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("sandboxes changed across FLUSHALL: %v -> %v", before, after)
	}
}

func TestProvisioningPastItsBudgetAnswers503ThenServes(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--process-isolation", "none") // slowSandbox is a script: see there
	slow, _ := slowSandbox(t, f, "2")
	g := f.start("--process-binary", slow, "--provision-wait", "300ms")
	code, body, hdr := call(t, "POST", g.URL+"/threads/slowpoke/v1/shell/exec", map[string]any{"command": "echo hi"})
	if code != 503 || errorCode(t, body) != "provisioning" || hdr.Get("Retry-After") == "" {
		t.Fatalf("within the create: %d %s retry-after=%q", code, body, hdr.Get("Retry-After"))
	}
	// The create went on without the client: a retry finds the sandbox.
	waitFor(t, func() bool {
		code, _, _ := call(t, "GET", g.URL+"/threads/slowpoke/sandbox", nil)
		return code == 200
	})
	if d := shell(t, g.URL, "slowpoke", "echo hi"); strings.TrimSpace(d.Output) != "hi" {
		t.Fatalf("after the create: %+v", d)
	}
	if n := len(f.sandboxes()); n != 1 {
		t.Fatalf("%d sandboxes", n)
	}
}

func TestHardCapAnswers503(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--max-sandboxes", "1", "--cap-mode", "hard")
	g := f.start()
	shell(t, g.URL, "first", "true")
	code, body, hdr := call(t, "POST", g.URL+"/threads/second/v1/shell/exec", map[string]any{"command": "true"})
	if code != 503 || errorCode(t, body) != "capacity" || hdr.Get("Retry-After") == "" {
		t.Fatalf("at the hard cap: %d %s", code, body)
	}
	// Releasing the first makes it evictable: the second thread gets room.
	call(t, "DELETE", g.URL+"/threads/first/sandbox", nil)
	shell(t, g.URL, "second", "true")
	if n := len(f.sandboxes()); n != 1 {
		t.Fatalf("%d sandboxes under a cap of 1", n)
	}
}

func TestIdleSandboxesAreReapedButNotBusyOnes(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--idle-timeout", "3s", "--reap-interval", "200ms")
	g := f.start()
	shell(t, g.URL, "idle", "true")
	shell(t, g.URL, "busy", "true")
	ws := filepath.Join(f.dataDir, "users", "default", "threads", "busy", "user-data", "workspace")
	res := execAsync(g.URL, "busy", "touch /mnt/user-data/workspace/started; "+
		"while [ ! -f /mnt/user-data/workspace/go ]; do sleep 0.05; done; echo survived")
	waitFor(t, func() bool { _, err := os.Stat(filepath.Join(ws, "started")); return err == nil })
	started := time.Now()
	idleID := identity.SandboxID("default", "idle")
	waitFor(t, func() bool {
		for _, s := range f.sandboxes() {
			if s.SandboxID == idleID {
				return false
			}
		}
		return true
	})
	// Not a synchronisation: the busy command must run for longer than
	// idle_timeout (3s) plus a few reap intervals while the reaper runs.
	time.Sleep(time.Until(started.Add(4 * time.Second)))
	if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if d := await(t, res, 30*time.Second); strings.TrimSpace(d.Output) != "survived" {
		t.Fatalf("long command: %+v", d)
	}
}

func TestReconcilerRestoresRecordsAfterRedisLoss(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--reconcile-interval", "200ms", "--reconcile-grace", "1ms", "--max-sandboxes", "0")
	g := f.start()
	shell(t, g.URL, "orphan-1", "true")
	shell(t, g.URL, "orphan-2", "true")
	before := incarnations(f)
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	_ = rdb.FlushAll(context.Background())
	// No traffic: the reconciler alone puts them back, into the warm pool.
	waitFor(t, func() bool {
		for _, th := range []string{"orphan-1", "orphan-2"} {
			code, body, _ := call(t, "GET", g.URL+"/threads/"+th+"/sandbox", nil)
			if code != 200 || !strings.Contains(string(body), `"state":"warm"`) {
				return false
			}
		}
		return true
	})
	if after := incarnations(f); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Fatalf("sandboxes changed: %v -> %v", before, after)
	}
	if !strings.Contains(g.logs.String(), "adopted a sandbox without a record") {
		t.Fatal("no adoption logged")
	}
}

// slowSandbox is a sandbox binary that sleeps before it starts. Each run
// first appends its pid (which stays the sandbox's after the exec) to the
// file pids names.
//
// A script cannot be an isolated sandbox's init (that is the gateway binary
// itself): its fleet runs with process_isolation: none.
func slowSandbox(t *testing.T, f *fleet, seconds string) (bin, pids string) {
	t.Helper()
	dir := t.TempDir()
	bin, pids = filepath.Join(dir, "slow-sandbox"), filepath.Join(dir, "pids")
	script := "#!/bin/sh\necho $$ >> " + pids + "\nsleep " + seconds + "\nexec " + f.bin + " \"$@\"\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, pids
}
