package jail

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/testutil"
)

// realFreezers are the cgroup freezers this machine offers root: the v1
// freezer hierarchy or v2 (OpenCgroups'), and the v2 hierarchy a hybrid
// host mounts beside v1 (at /sys/fs/cgroup/unified: no controllers, but
// cgroup.freeze), as a Cgroups of its own.
func realFreezers(t *testing.T) map[string]*Cgroups {
	t.Helper()
	found := map[string]*Cgroups{}
	if os.Geteuid() != 0 {
		return found
	}
	if c := OpenCgroups("/sys/fs/cgroup"); c.CanFreeze() {
		found[c.Mode()] = testCgroups(t, c)
	}
	const unified = "/sys/fs/cgroup/unified"
	var fs syscall.Statfs_t
	if _, ok := found[CgroupV2]; !ok && syscall.Statfs(unified, &fs) == nil && fs.Type == 0x63677270 { // CGROUP2_SUPER_MAGIC
		parent := filepath.Join(unified, fmt.Sprintf("sandgate-test-%d-%x", os.Getpid(), time.Now().UnixNano()))
		if err := os.Mkdir(parent, 0o755); err == nil {
			t.Cleanup(func() { _ = os.Remove(parent) })
			found[CgroupV2] = &Cgroups{mode: CgroupV2, dirs: []cgroupDir{{path: parent}}, freezer: parent}
		}
	}
	return found
}

// eachFreezer runs f as a parallel subtest in each real freezer (v2, v1),
// with a cgroup name no other test or run uses.
func eachFreezer(t *testing.T, f func(t *testing.T, c *Cgroups, name string)) {
	t.Helper()
	freezers := realFreezers(t)
	testutil.Require(t, len(freezers) > 0, "a cgroup freezer (v2, or v1's freezer hierarchy) writable by root")
	for mode, c := range freezers {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f(t, c, fmt.Sprintf("test-%d-%x", os.Getpid(), time.Now().UnixNano()))
		})
	}
}

// TestCgroupsFreeze freezes real processes (a shell and its child, both
// burning CPU) in each real freezer: frozen, they use no CPU; thawed, they
// run again; killed while frozen and thawed, they die at once.
func TestCgroupsFreeze(t *testing.T) {
	t.Parallel()
	eachFreezer(t, func(t *testing.T, c *Cgroups, name string) {
		dir := filepath.Join(c.freezer, name)
		ctx := t.Context()
		cmd, stdin := startWaiting(t, "(while :; do :; done) & while :; do :; done")
		t.Cleanup(func() {
			killCgroup(dir)
			_ = c.Freeze(ctx, name, false)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if err := c.Remove(name); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
		if err := c.Place(name, cmd.Process.Pid, Limits{}.WithDefaults()); err != nil {
			t.Fatalf("Place: %v", err)
		}
		_, _ = stdin.Write([]byte("go\n"))
		waitFor(t, "both processes in the cgroup", func() bool { return len(cgroupPIDs(t, dir)) == 2 })
		pids := cgroupPIDs(t, dir)
		waitFor(t, "the processes burn CPU", func() bool { return cpuTicks(pids) > 20 })

		for range 2 { // idempotent
			if err := c.Freeze(ctx, name, true); err != nil {
				t.Fatalf("Freeze: %v", err)
			}
		}
		if frozen, err := c.Frozen(name); !frozen || err != nil {
			t.Fatalf("Frozen = %v, %v after Freeze", frozen, err)
		}
		before := cpuTicks(pids)
		time.Sleep(time.Second)
		if after := cpuTicks(pids); after != before {
			t.Errorf("frozen processes used CPU: %d ticks, then %d", before, after)
		}

		for range 2 {
			if err := c.Freeze(ctx, name, false); err != nil {
				t.Fatalf("thaw: %v", err)
			}
		}
		if frozen, err := c.Frozen(name); frozen || err != nil {
			t.Fatalf("Frozen = %v, %v after the thaw", frozen, err)
		}
		thawed := cpuTicks(pids)
		waitFor(t, "thawed processes burn CPU again", func() bool { return cpuTicks(pids) > thawed+20 })

		// Killed while frozen, they die once thawed at the latest (a v1
		// freezer holds them until then; v2 lets them die frozen).
		if err := c.Freeze(ctx, name, true); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		killCgroup(dir)
		if err := c.Freeze(ctx, name, false); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("frozen shell killed and thawed: %v, want killed", err)
		}
		waitFor(t, "the cgroup is empty", func() bool { return len(cgroupPIDs(t, dir)) == 0 })
		if took := time.Since(began); took > time.Second {
			t.Errorf("killed and thawed, the processes took %v to go", took)
		}
		if err := c.Remove(name); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		if err := c.Freeze(ctx, name, true); !errors.Is(err, ErrNoFreezer) {
			t.Errorf("Freeze of a removed cgroup: %v, want ErrNoFreezer", err)
		}
	})
}

func cgroupPIDs(t *testing.T, dir string) []int {
	t.Helper()
	var pids []int
	for _, f := range strings.Fields(readTrim(t, filepath.Join(dir, "cgroup.procs"))) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// cpuTicks sums the processes' user and system time (stat fields 14 and
// 15, in clock ticks).
func cpuTicks(pids []int) int {
	sum := 0
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		utime, _ := strconv.Atoi(f[11])
		stime, _ := strconv.Atoi(f[12])
		sum += utime + stime
	}
	return sum
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
