package jail

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/internal/testutil"
)

// fakeFiles creates files (with content) under root.
func fakeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenCgroups(t *testing.T) {
	t.Parallel()
	own := OwnCgroups()
	tests := []struct {
		name    string
		files   map[string]string
		mode    string
		dirs    []string // parents of the sandboxes' cgroups, under root
		freezer string   // the one that freezes, "" = none
		cpuacct string   // v1's that counts CPU, "" = none
	}{
		{"empty", nil, CgroupNone, nil, "", ""},
		{"v2", map[string]string{
			"cgroup.controllers": "cpu io memory pids\n", "cgroup.subtree_control": "",
			"sandgate/cgroup.subtree_control": "", "sandgate/cgroup.freeze": "0\n",
		}, CgroupV2, []string{"sandgate"}, "sandgate", ""},
		{"v2 before Linux 5.2", map[string]string{
			"cgroup.controllers": "cpu io memory pids\n", "cgroup.subtree_control": "",
			"sandgate/cgroup.subtree_control": "",
		}, CgroupV2, []string{"sandgate"}, "", ""},
		{"v2 without pids", map[string]string{
			"cgroup.controllers": "cpu memory\n", "cgroup.subtree_control": "",
		}, CgroupNone, nil, "", ""},
		{"v1", map[string]string{
			"memory/memory.limit_in_bytes": "", "pids/cgroup.procs": "",
		}, CgroupV1, []string{"memory/sandgate", "pids/sandgate"}, "", ""},
		{"v1 with freezer", map[string]string{
			"memory/memory.limit_in_bytes": "", "pids/cgroup.procs": "", "freezer/cgroup.procs": "",
		}, CgroupV1, []string{"memory/sandgate", "pids/sandgate", "freezer/sandgate"}, "freezer/sandgate", ""},
		{"v1 with cpuacct", map[string]string{
			"memory/memory.limit_in_bytes": "", "pids/cgroup.procs": "", "cpuacct/cpuacct.usage": "",
		}, CgroupV1, []string{"memory/sandgate", "pids/sandgate", "cpuacct/sandgate"}, "", "cpuacct/sandgate"},
		{"v1 with freezer and cpuacct", map[string]string{
			"memory/memory.limit_in_bytes": "", "pids/cgroup.procs": "", "freezer/cgroup.procs": "", "cpuacct/cpuacct.usage": "",
		}, CgroupV1, []string{"memory/sandgate", "pids/sandgate", "freezer/sandgate", "cpuacct/sandgate"}, "freezer/sandgate", "cpuacct/sandgate"},
		// A cpuacct directory that is not a cpuacct hierarchy (no
		// cpuacct.usage): none, CPU from /proc.
		{"v1 cpuacct not a hierarchy", map[string]string{
			"memory/memory.limit_in_bytes": "", "pids/cgroup.procs": "", "cpuacct/cgroup.procs": "",
		}, CgroupV1, []string{"memory/sandgate", "pids/sandgate"}, "", ""},
		{"v1 in own cgroup", map[string]string{
			"memory/memory.limit_in_bytes": "", "pids/cgroup.procs": "",
			"memory" + own["memory"] + "/cgroup.procs": "", "pids" + own["pids"] + "/cgroup.procs": "",
		}, CgroupV1, []string{filepath.Join("memory", own["memory"], "sandgate"), filepath.Join("pids", own["pids"], "sandgate")}, "", ""},
		{"v1 without pids", map[string]string{"memory/memory.limit_in_bytes": "", "freezer/cgroup.procs": ""}, CgroupNone, nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			fakeFiles(t, root, tt.files)
			c := OpenCgroups(root)
			if c.Mode() != tt.mode {
				t.Fatalf("mode %q, want %q", c.Mode(), tt.mode)
			}
			var dirs []string
			for _, d := range c.dirs {
				dirs = append(dirs, strings.TrimPrefix(d.path, root+"/"))
			}
			if strings.Join(dirs, " ") != strings.Join(tt.dirs, " ") {
				t.Errorf("parents %q, want %q", dirs, tt.dirs)
			}
			if got := strings.TrimPrefix(c.freezer, root+"/"); got != tt.freezer || c.CanFreeze() != (tt.freezer != "") {
				t.Errorf("freezer %q (CanFreeze %v), want %q", got, c.CanFreeze(), tt.freezer)
			}
			wantCPU := map[string]string{CgroupV2: "cgroup v2 cpu.stat", CgroupV1: "/proc of the processes in its memory cgroup",
				CgroupNone: "/proc of its process tree"}[tt.mode]
			if tt.cpuacct != "" {
				wantCPU = "cgroup v1 cpuacct.usage"
			}
			if got := strings.TrimPrefix(c.cpuacct, root+"/"); got != tt.cpuacct || c.CPUFrom() != wantCPU ||
				c.CountsCPU() != (tt.mode == CgroupV2 || tt.cpuacct != "") {
				t.Errorf("cpuacct %q (CPUFrom %q, CountsCPU %v), want %q (%q)", got, c.CPUFrom(), c.CountsCPU(), tt.cpuacct, wantCPU)
			}
			for _, d := range tt.dirs {
				if !isDir(filepath.Join(root, d)) {
					t.Errorf("%s not created", d)
				}
			}
			if tt.mode == CgroupV2 {
				for _, f := range []string{"cgroup.subtree_control", "sandgate/cgroup.subtree_control"} {
					if b, _ := os.ReadFile(filepath.Join(root, f)); string(b) != "+memory +pids" {
						t.Errorf("%s is %q, want the controllers enabled", f, b)
					}
				}
			}
			if tt.mode == CgroupNone {
				if err := c.Place("abc", os.Getpid(), Limits{}); err != nil {
					t.Errorf("Place without cgroups: %v", err)
				}
				if err := c.Remove("abc"); err != nil {
					t.Errorf("Remove without cgroups: %v", err)
				}
				if err := c.Freeze(t.Context(), "abc", true); !errors.Is(err, ErrNoFreezer) {
					t.Errorf("Freeze without cgroups: %v, want ErrNoFreezer", err)
				}
			}
		})
	}
}

func TestCgroupsNames(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	fakeFiles(t, root, map[string]string{"memory/memory.limit_in_bytes": "", "pids/cgroup.procs": ""})
	c := OpenCgroups(root)
	for _, name := range []string{"", ".", "..", "a/b", "../x", "a.b", "a b", strings.Repeat("a", 129)} {
		if err := c.Place(name, os.Getpid(), Limits{}); err == nil || !strings.Contains(err.Error(), "invalid sandbox name") {
			t.Errorf("Place(%q): %v, want invalid name", name, err)
		}
		if err := c.Remove(name); err == nil {
			t.Errorf("Remove(%q) accepted it", name)
		}
	}
	// A valid name gets its directories; the fake has no control files in
	// them (a cgroup file system makes those), so Place fails without
	// creating one, and removes the directories again.
	err := c.Place("0af3-x_Y", os.Getpid(), Limits{}.WithDefaults())
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Place on the fake: %v, want a missing control file", err)
	}
	for _, d := range c.dirs {
		if _, err := os.Stat(filepath.Join(d.path, "0af3-x_Y")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left behind: %v", d.path, err)
		}
	}
	if err := c.Remove("0af3-x_Y"); err != nil {
		t.Errorf("Remove of a missing cgroup: %v", err)
	}
}

// TestCgroupsV1 places real processes into a real v1 memory and pids
// cgroup and checks the limits hold.
func TestCgroupsV1(t *testing.T) {
	shared := OpenCgroups("/sys/fs/cgroup")
	testutil.Require(t, os.Geteuid() == 0 && shared.Mode() == CgroupV1, "cgroup v1 memory and pids hierarchies writable by root")
	t.Parallel()
	c := testCgroups(t, shared)
	name := fmt.Sprintf("test-%d-%x", os.Getpid(), time.Now().UnixNano())
	memDir, pidsDir := filepath.Join(c.dirs[0].path, name), filepath.Join(c.dirs[1].path, name)
	t.Cleanup(func() {
		killCgroup(pidsDir)
		if err := c.Remove(name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	l := Limits{Memory: 64 << 20, Processes: 16}.WithDefaults()

	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	if err := c.Place(name, sleeper.Process.Pid, l); err != nil {
		t.Fatalf("Place: %v", err)
	}
	for file, want := range map[string]string{
		filepath.Join(memDir, "memory.limit_in_bytes"):       strconv.Itoa(64 << 20),
		filepath.Join(memDir, "memory.memsw.limit_in_bytes"): strconv.Itoa(64 << 20),
		filepath.Join(pidsDir, "pids.max"):                   strconv.Itoa(16 + ServerThreads),
		filepath.Join(memDir, "cgroup.procs"):                strconv.Itoa(sleeper.Process.Pid),
		filepath.Join(pidsDir, "cgroup.procs"):               strconv.Itoa(sleeper.Process.Pid),
	} {
		if got := readTrim(t, file); got != want {
			t.Errorf("%s is %q, want %q", file, got, want)
		}
	}
	procCgroup := readTrim(t, fmt.Sprintf("/proc/%d/cgroup", sleeper.Process.Pid))
	inside := "/" + cgroupParent + "/" + filepath.Base(c.dirs[0].path) + "/" + name
	for _, want := range []string{":memory:", ":pids:"} {
		if !strings.Contains(procCgroup, want) || !strings.Contains(procCgroup, inside) {
			t.Errorf("/proc/<pid>/cgroup lacks %s…%s:\n%s", want, inside, procCgroup)
		}
	}

	t.Run("memory", func(t *testing.T) {
		// 256 MiB touched in a 64 MiB cgroup (swap counted too): the
		// OOM killer ends it.
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		out, err := runPlaced(t, c, name, l, `exec "$0"`, self, scenarioEnv+"=alloc", "JAIL_ALLOC="+strconv.Itoa(256<<20))
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("256 MiB allocation in a 64 MiB cgroup: %v, want killed\n%s", err, out)
		}
		if oom := readTrim(t, filepath.Join(memDir, "memory.oom_control")); !strings.Contains(oom, "oom_kill 1") {
			t.Errorf("memory.oom_control:\n%s\nwant one OOM kill", oom)
		}
		if u, ok, err := c.Usage(name); !ok || err != nil || u.OOMKills != 1 {
			t.Errorf("Usage after one OOM kill = %+v, %v, %v; want OOMKills 1", u, ok, err)
		}
	})
	t.Run("pids", func(t *testing.T) {
		out, err := runPlaced(t, c, name, l,
			`n=0; while [ $n -lt 200 ]; do sleep 60 >/dev/null 2>&1 & n=$((n+1)); echo $n; done`)
		n, _ := strconv.Atoi(lastNumber(out))
		// The sleeper and the shell count too.
		if want := 16 + ServerThreads - 2; err == nil || n != want {
			t.Errorf("fork loop in a %d-process cgroup started %d: %v, want %d and a failure\n%s", 16+ServerThreads, n, err, want, out)
		}
		killCgroup(pidsDir)
	})

	_ = sleeper.Process.Kill()
	_ = sleeper.Wait()
	if err := c.Remove(name); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	for _, d := range []string{memDir, pidsDir} {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there: %v", d, err)
		}
	}
	if err := c.Remove(name); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

// runPlaced starts `sh -c script args...` (env added), places the shell in
// the sandbox's cgroups before it goes on, and waits for it.
func runPlaced(t *testing.T, c *Cgroups, name string, l Limits, script string, argsEnv ...string) (string, error) {
	t.Helper()
	var args, env []string
	for _, a := range argsEnv {
		if strings.Contains(a, "=") {
			env = append(env, a)
		} else {
			args = append(args, a)
		}
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c", "read go; " + script}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.Place(name, cmd.Process.Pid, l); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("Place: %v", err)
	}
	_, _ = stdin.Write([]byte("go\n"))
	_ = stdin.Close()
	err = cmd.Wait()
	return out.String(), err
}

// killCgroup kills every process in a v1 cgroup.
// startWaiting starts /bin/sh running script once a line arrives on its
// stdin (returned): the caller places it in a cgroup first.
func startWaiting(t *testing.T, script string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "read go; "+script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin
}

func killCgroup(dir string) {
	for _, pid := range cgroupProcs(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// cgroupProcs lists the processes in a cgroup (none if it cannot tell).
func cgroupProcs(dir string) []int {
	f, err := os.Open(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var pids []int
	s := bufio.NewScanner(f)
	for s.Scan() {
		if pid, err := strconv.Atoi(s.Text()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// testCgroups is c with each of its parents replaced by a child of its own
// for this test, removed when the test ends. The shared parents are never
// removed: another process (a sandbox, another package's test) may be
// placing a cgroup in one at that moment, and would fail with ENOENT.
func testCgroups(t *testing.T, c *Cgroups) *Cgroups {
	t.Helper()
	child := fmt.Sprintf("test-%d-%x", os.Getpid(), time.Now().UnixNano())
	own := &Cgroups{mode: c.mode}
	for _, d := range c.dirs {
		dir := filepath.Join(d.path, child)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// Registered before the cleanups of the cgroups placed in it, so it
		// runs after them.
		t.Cleanup(func() {
			if err := removeCgroup(dir); err != nil {
				t.Errorf("remove the test's cgroup: %v", err)
			}
		})
		if c.mode == CgroupV2 {
			if err := writeControl(dir, "cgroup.subtree_control", "+memory +pids"); err != nil {
				t.Fatal(err)
			}
		}
		own.dirs = append(own.dirs, cgroupDir{path: dir, limits: d.limits})
		if d.path == c.freezer {
			own.freezer = dir
		}
		if d.path == c.cpuacct {
			own.cpuacct = dir
		}
	}
	return own
}

// TestOpenCgroupsReadOnlyCpuacct: a v1 cpuacct hierarchy the gateway may
// not write (mounted read-only, with the sandboxes' parent already there
// from before, so mkdir says it exists) gives no cpuacct, CPU from /proc,
// rather than a Place that fails for every sandbox. In a mount namespace
// of this test's own thread.
func TestOpenCgroupsReadOnlyCpuacct(t *testing.T) {
	t.Parallel()
	testutil.Require(t, os.Geteuid() == 0, "root (a read-only bind mount)")
	root := t.TempDir()
	fakeFiles(t, root, map[string]string{"memory/memory.limit_in_bytes": "", "pids/cgroup.procs": "",
		"cpuacct/cpuacct.usage": "", "cpuacct/sandgate/cpuacct.usage": ""})
	done := make(chan *Cgroups, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with its namespace
		defer close(done)
		cpuacct := filepath.Join(root, "cpuacct")
		for _, err := range []error{unix.Unshare(unix.CLONE_NEWNS),
			unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""),
			unix.Mount(cpuacct, cpuacct, "", unix.MS_BIND, ""),
			unix.Mount("", cpuacct, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "")} {
			if err != nil {
				t.Errorf("read-only bind mount: %v", err)
				return
			}
		}
		done <- OpenCgroups(root)
	}()
	c := <-done
	if c == nil {
		return
	}
	if c.Mode() != CgroupV1 || c.cpuacct != "" || c.CountsCPU() || len(c.dirs) != 2 {
		t.Errorf("read-only cpuacct: mode %s, cpuacct %q, %d parents; want v1 without cpuacct", c.Mode(), c.cpuacct, len(c.dirs))
	}
}
