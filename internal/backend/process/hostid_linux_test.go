package process

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestHostIDsOfCollidingThreads: two threads chosen so that their sandbox
// ids collide under the old derived host uid (2^30 + fnv(sid) mod 2^24, a
// few thousand names to try) run as different host uids; a gateway
// restarted on the same state dir finds both and keeps their ids. Inside,
// /proc/self/cgroup names no host cgroup (the sandbox's own is its root).
func TestHostIDsOfCollidingThreads(t *testing.T) {
	t.Parallel()
	testutil.Require(t, os.Geteuid() == 0, "root (sandboxes get host uids of their own)")
	user := "hana"
	seen := map[int]string{}
	var threads [2]string
	for i := 0; threads[1] == ""; i++ {
		thread := "uid-" + strconv.Itoa(i)
		old := jail.SandboxHostID(identity.SandboxID(user, thread))
		if other, ok := seen[old]; ok {
			threads = [2]string{other, thread}
		}
		seen[old] = thread
	}
	stateDir := t.TempDir()
	p := newProcess(t, stateDir)
	mc := backend.MountConfig{DataDir: t.TempDir()}
	var uids [2]int
	var infos [2]backend.Info
	for i, thread := range threads {
		infos[i] = backendtest.MustCreate(t, p, backendtest.Spec(t, mc, user, thread))
		uids[i] = hostUID(t, pidOf(t, infos[i]))
		// "0::/" with cgroup v2; with v1 every hierarchy's line ends in
		// ":/" as well.
		res := backendtest.Exec(t, infos[i], "cat /proc/self/cgroup")
		for line := range strings.Lines(res.Output) {
			if !strings.HasSuffix(strings.TrimSpace(line), ":/") {
				t.Errorf("sandbox %s: /proc/self/cgroup has %q, want every cgroup \"/\"", infos[i].SandboxID, line)
			}
		}
		if !strings.Contains(res.Output, "0::/") {
			t.Errorf("sandbox %s: /proc/self/cgroup is %q, want 0::/ in it", infos[i].SandboxID, res.Output)
		}
	}
	if uids[0] == uids[1] {
		t.Fatalf("threads %q and %q (sandboxes %s, %s) both run as host uid %d", threads[0], threads[1],
			infos[0].SandboxID, infos[1].SandboxID, uids[0])
	}
	restarted := newProcess(t, stateDir)
	for i, info := range infos {
		if _, ok, err := restarted.Discover(backendtest.Ctx(t), info.SandboxID); !ok || err != nil {
			t.Fatalf("Discover %s after a restart: %v, %v", info.SandboxID, ok, err)
		}
		if uid, _, err := restarted.hostIDs.For(info.SandboxID); err != nil || uid != uids[i] {
			t.Errorf("sandbox %s after a restart: host id %d, %v; its processes run as %d", info.SandboxID, uid, err, uids[i])
		}
	}
}

// hostUID is a process's real uid as the host sees it.
func hostUID(t *testing.T, pid int) int {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			uid, err := strconv.Atoi(strings.Fields(rest)[0])
			if err != nil {
				t.Fatal(err)
			}
			return uid
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return 0
}
