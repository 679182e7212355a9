package jail

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/proctree"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestCgroupsUsageOfARealSandbox places a real shell in this machine's
// cgroups (v2, or v1 memory and pids) that then holds 64 MB in a pipe's
// reader, and reads it back through Usage: memory at least 64 MB, peak at
// least that, the placed limit, the processes (CPU too, from v2's cpu.stat
// or v1's cpuacct.usage: TestCgroupsCPUOfARealHog), and through the open
// files, read twice; with v1 and no cpuacct, the processes its memory
// cgroup lists. Removed, the sandbox has no usage (ok false).
func TestCgroupsUsageOfARealSandbox(t *testing.T) {
	t.Parallel()
	shared := OpenCgroups("/sys/fs/cgroup")
	testutil.Require(t, os.Geteuid() == 0 && shared.Mode() != CgroupNone, "cgroups (v2, or v1 memory and pids) writable by root")
	c := testCgroups(t, shared)
	name := "usage-test"
	l := Limits{Memory: 512 << 20}.WithDefaults()
	cmd, stdin := startWaiting(t, "{ head -c 67108864 /dev/zero; sleep 60; } | tail >/dev/null")
	t.Cleanup(func() {
		killCgroup(c.dir(c.dirs[0].path, name))
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = c.Remove(name)
	})
	if err := c.Place(name, cmd.Process.Pid, l); err != nil {
		t.Fatal(err)
	}
	_, _ = stdin.Write([]byte("go\n"))

	var u Usage
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ok bool
		var err error
		u, ok, err = c.Usage(name)
		if err != nil || !ok {
			t.Fatalf("Usage = %+v, %v, %v", u, ok, err)
		}
		if u.Memory >= 64<<20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if u.Memory < 64<<20 || u.MemoryPeak < u.Memory || u.MemoryLimit != 512<<20 || u.PIDs < 3 {
		t.Errorf("Usage (%s) = %+v, want memory >= 64 MB, peak >= memory, limit 512 MB, 3+ processes", c.Mode(), u)
	}
	if u.HasCPU != c.CountsCPU() {
		t.Errorf("HasCPU = %v with %s (cpuacct %q)", u.HasCPU, c.Mode(), c.cpuacct)
	}
	h, ok, err := c.OpenUsage(name)
	if !ok || err != nil {
		t.Fatalf("OpenUsage with %s: ok %v, %v", c.Mode(), ok, err)
	}
	// Read twice: the second pread of the held files is fresh, not EOF.
	for range 2 {
		hu, err := h.Read()
		if err != nil || hu.Memory < 64<<20 || hu.MemoryLimit != 512<<20 || hu.PIDs < 3 || hu.HasCPU != u.HasCPU {
			t.Errorf("UsageFiles.Read (%s) = %+v, %v", c.Mode(), hu, err)
		}
	}
	h.Close()
	// v1 without cpuacct: the cgroup's processes, the shell (its leader)
	// among them.
	h, ok, err = withoutCpuacct(c).OpenUsage(name)
	if !ok || err != nil {
		t.Fatalf("OpenUsage without cpuacct (%s): ok %v, %v", c.Mode(), ok, err)
	}
	if procs, err := h.Procs(nil); c.Mode() == CgroupV1 && (err != nil || len(procs) < 3 || !slices.Contains(procs, cmd.Process.Pid)) {
		t.Errorf("Procs = %v, %v; want 3+ with the shell %d", procs, err, cmd.Process.Pid)
	}
	// v1 hands an open file the pid list it built before: a process that
	// joined since must be in the next read all the same.
	if c.Mode() == CgroupV1 {
		late := exec.Command("sleep", "30")
		if err := late.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = late.Process.Kill(); _ = late.Wait() }()
		if err := c.Place(name, late.Process.Pid, l); err != nil {
			t.Fatal(err)
		}
		if procs, err := h.Procs(nil); err != nil || !slices.Contains(procs, late.Process.Pid) {
			t.Errorf("Procs after a process joined = %v, %v; want it with %d", procs, err, late.Process.Pid)
		}
	}
	h.Close()

	killCgroup(c.dir(c.dirs[0].path, name))
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := c.Remove(name); err != nil {
		t.Fatal(err)
	}
	if u, ok, err := c.Usage(name); ok || err != nil {
		t.Errorf("Usage of a removed sandbox = %+v, %v, %v; want not ok", u, ok, err)
	}
}

// withoutCpuacct is c as a gateway opens it on a v1 host without a cpuacct
// hierarchy it may write, or before sandboxes got a cpuacct cgroup.
func withoutCpuacct(c *Cgroups) *Cgroups {
	o := *c
	o.dirs = slices.DeleteFunc(slices.Clone(c.dirs), func(d cgroupDir) bool { return d.path == c.cpuacct })
	o.cpuacct = ""
	return &o
}

// TestCgroupsCPUOfARealHog places a CPU hog (a shell spinning and a
// spinning child of it) in this machine's real cgroups and reads its CPU
// through the files a sampler holds open. With its own cgroup's counter
// (v2's cpu.stat, v1's cpuacct.usage) the CPU is there (HasCPU), with no
// process list to walk (Procs lists none), grows while the hog runs, and
// covers what /proc says the hog's processes used. A v1 sandbox placed
// without a cpuacct cgroup (by a gateway before this one, adopted after a
// restart) has no CPU figure and lists its processes instead. Removed,
// none of its cgroup directories is left, cpuacct's included.
func TestCgroupsCPUOfARealHog(t *testing.T) {
	t.Parallel()
	shared := OpenCgroups("/sys/fs/cgroup")
	testutil.Require(t, os.Geteuid() == 0 && shared.CountsCPU(),
		"cgroup v2, or v1 memory, pids and cpuacct hierarchies, writable by root")
	c := testCgroups(t, shared)
	for _, tt := range []struct {
		name   string
		placer *Cgroups
		hasCPU bool
	}{
		{"own cgroup", c, true},
		{"v1 placed before cpuacct", withoutCpuacct(c), false},
	} {
		if c.Mode() == CgroupV2 && !tt.hasCPU {
			continue // v2 cgroups all count CPU
		}
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name := strings.ReplaceAll(tt.name, " ", "-")
			cmd, stdin := startWaiting(t, "(while :; do :; done) & while :; do :; done")
			t.Cleanup(func() {
				killCgroup(c.dir(c.dirs[0].path, name))
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				_ = c.Remove(name)
			})
			if err := tt.placer.Place(name, cmd.Process.Pid, Limits{}.WithDefaults()); err != nil {
				t.Fatal(err)
			}
			_, _ = stdin.Write([]byte("go\n"))
			if c.cpuacct != "" && isDir(filepath.Join(c.cpuacct, name)) != tt.hasCPU {
				t.Errorf("cpuacct cgroup there: %v, want %v", !tt.hasCPU, tt.hasCPU)
			}

			// The gateway that adopts it opens it with its cpuacct.
			h, ok, err := c.OpenUsage(name)
			if !ok || err != nil {
				t.Fatalf("OpenUsage (%s): ok %v, %v", c.Mode(), ok, err)
			}
			defer h.Close()
			first, err := h.Read()
			if err != nil || first.HasCPU != tt.hasCPU {
				t.Fatalf("Read = %+v, %v; want HasCPU %v", first, err, tt.hasCPU)
			}
			procs, err := h.Procs(nil)
			if err != nil || (len(procs) == 0) != tt.hasCPU || (!tt.hasCPU && !slices.Contains(procs, cmd.Process.Pid)) {
				t.Fatalf("Procs = %v, %v; want none with a CPU counter, else the shell %d", procs, err, cmd.Process.Pid)
			}
			if tt.hasCPU {
				checkHogCPU(t, c, name, h, first)
			}

			killCgroup(c.dir(c.dirs[0].path, name))
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if err := c.Remove(name); err != nil {
				t.Fatal(err)
			}
			for _, d := range c.dirs {
				if dir := filepath.Join(d.path, name); isDir(dir) {
					t.Errorf("%s left after Remove", dir)
				}
			}
		})
	}
}

// checkHogCPU: the sandbox's CPU (h, first read first) grows while its hog
// runs, 200 ms within 10 s on a loaded machine too, and covers what
// /proc/PID/stat says its processes used, read before it.
func checkHogCPU(t *testing.T, c *Cgroups, name string, h *UsageFiles, first Usage) {
	t.Helper()
	var u Usage
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if u, err = h.Read(); err != nil || u.CPU-first.CPU >= 200*time.Millisecond || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || u.CPU-first.CPU < 200*time.Millisecond {
		t.Fatalf("CPU %s then %s (%v); want 200 ms more", first.CPU, u.CPU, err)
	}
	var ticks uint64
	pids := cgroupProcs(c.dir(c.dirs[0].path, name))
	for _, pid := range pids {
		if p, found, err := proctree.Read(pid); err == nil && found {
			ticks += p.CPUTicks
		}
	}
	fromProc := time.Duration(ticks) * time.Second / proctree.ClockTicks
	slack := time.Duration(len(pids)) * time.Second / proctree.ClockTicks // a clock tick of rounding each
	if u, err = h.Read(); err != nil || len(pids) < 2 || u.CPU < fromProc-slack {
		t.Errorf("cgroup CPU %s (%v) < %s that /proc/PID/stat of its %d processes says", u.CPU, err, fromProc, len(pids))
	}
}
