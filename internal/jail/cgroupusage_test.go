package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func writeUsageV2(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var v2Files = map[string]string{
	"cpu.stat":       "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 0\n",
	"memory.current": "209715200\n",
	"memory.peak":    "314572800\n",
	"memory.max":     "536870912\n",
	"pids.current":   "3\n",
	"memory.events":  "low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\noom_group_kill 0\n",
}

func readV2(t *testing.T, dir string) (Usage, error) {
	h, err := OpenUsageV2(dir)
	if err != nil {
		return Usage{}, err
	}
	defer h.Close()
	return h.Read()
}

// TestReadUsageV2 reads the files a cgroup v2 sandbox has, and one on a
// kernel without memory.peak with no memory limit.
func TestReadUsageV2(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "sb")
	writeUsageV2(t, dir, v2Files)
	u, err := readV2(t, dir)
	want := Usage{CPU: 2500 * time.Millisecond, HasCPU: true, Memory: 200 << 20, MemoryPeak: 300 << 20, MemoryLimit: 512 << 20, PIDs: 3, OOMKills: 2}
	if err != nil || u != want {
		t.Errorf("ReadUsageV2 = %+v, %v; want %+v", u, err, want)
	}

	old := filepath.Join(t.TempDir(), "old")
	files := map[string]string{}
	for k, v := range v2Files {
		files[k] = v
	}
	delete(files, "memory.peak")
	files["memory.max"] = "max\n"
	writeUsageV2(t, old, files)
	u, err = readV2(t, old)
	if err != nil || u.MemoryPeak != 0 || u.MemoryLimit != 0 || u.Memory != 200<<20 {
		t.Errorf("ReadUsageV2 without memory.peak, memory.max max = %+v, %v", u, err)
	}

	bad := filepath.Join(t.TempDir(), "bad")
	files["cpu.stat"] = "user_usec 1\n"
	writeUsageV2(t, bad, files)
	if _, err := readV2(t, bad); err == nil {
		t.Error("ReadUsageV2 of a cpu.stat without usage_usec succeeded")
	}
}

// BenchmarkReadUsageV2 is the sampler's per-sandbox cost on cgroup v2: one
// pread of each sandbox's six open files, over N directories so the page cache
// and dentry lookups are not one hot path (docs/OBSERVABILITY.md
// extrapolates it to 1,000 sandboxes a second).
func BenchmarkReadUsageV2(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			root := b.TempDir()
			dirs := make([]string, n)
			for i := range dirs {
				dirs[i] = filepath.Join(root, fmt.Sprintf("sb%d", i))
				writeUsageV2(b, dirs[i], v2Files)
			}
			hs := make([]*UsageFiles, n)
			for i, d := range dirs {
				h, err := OpenUsageV2(d)
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close()
				hs[i] = h
			}
			b.ReportAllocs()
			// CPU time of this thread too: on a loaded machine wall time
			// counts the waits for a core, the cost is what the pass burns.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var r0, r1 unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_THREAD, &r0)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, h := range hs {
					if _, err := h.Read(); err != nil {
						b.Fatal(err)
					}
				}
			}
			_ = unix.Getrusage(unix.RUSAGE_THREAD, &r1)
			cpu := r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sandbox")
			b.ReportMetric(float64(cpu)/float64(b.N*n), "cpu-ns/sandbox")
		})
	}
}

// TestReadUsageV1 reads a v1 sandbox's files: "no limit" as v1 spells it
// is 0; its CPU from its cpuacct.usage (nanoseconds) where it has one, with
// no process list then; else (no cpuacct hierarchy, or a sandbox placed
// before sandboxes got a cpuacct cgroup) none, and cgroup.procs longer than
// one read's buffer (a pid cut by its end) lists every process once.
func TestReadUsageV1(t *testing.T) {
	t.Parallel()
	mem, pids, cpu := filepath.Join(t.TempDir(), "memory"), filepath.Join(t.TempDir(), "pids"), filepath.Join(t.TempDir(), "cpuacct")
	var procs []byte
	var all []int
	for pid := 100000; pid < 100200; pid++ { // 200 seven-byte lines: 1,400 bytes
		procs = fmt.Appendf(procs, "%d\n", pid)
		all = append(all, pid)
	}
	writeUsageV2(t, mem, map[string]string{"memory.usage_in_bytes": "209715200\n", "memory.max_usage_in_bytes": "314572800\n",
		"memory.limit_in_bytes": "9223372036854771712\n", "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
		"cgroup.procs": string(procs)})
	writeUsageV2(t, pids, map[string]string{"pids.current": "200\n"})
	writeUsageV2(t, cpu, map[string]string{"cpuacct.usage": "2500000000\n"})
	noCPU := Usage{Memory: 200 << 20, MemoryPeak: 300 << 20, PIDs: 200, OOMKills: 1}
	withCPU := noCPU
	withCPU.CPU, withCPU.HasCPU = 2500*time.Millisecond, true
	for _, tt := range []struct {
		name, cpuDir string
		want         Usage
		procs        []int
	}{
		{"cpuacct", cpu, withCPU, nil},
		{"no cpuacct hierarchy", "", noCPU, all},
		{"placed before cpuacct", filepath.Join(t.TempDir(), "none"), noCPU, all},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, err := openUsageV1(mem, pids, tt.cpuDir)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			for range 2 { // the open files read afresh
				u, err := h.Read()
				if err != nil || u != tt.want {
					t.Errorf("Read = %+v, %v; want %+v", u, err, tt.want)
				}
				got, err := h.Procs(nil)
				if err != nil || fmt.Sprint(got) != fmt.Sprint(tt.procs) {
					t.Errorf("Procs = %d pids (%v), want %d", len(got), err, len(tt.procs))
				}
			}
		})
	}
}

// TestReadUsageSlowFiles: memory, CPU and pids are read afresh on every
// Read; the limit, the peak and the OOM-kill count on the first and every
// usageSlowEvery-th after it, kept in between (the peak raised to the
// memory in use when that is more).
func TestReadUsageSlowFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(mem, oom string) {
		writeUsageV2(t, dir, map[string]string{"cpu.stat": "usage_usec 1000\n", "memory.current": mem + "\n",
			"memory.peak": mem + "\n", "memory.max": "max\n", "pids.current": "3\n", "memory.events": "oom_kill " + oom + "\n"})
	}
	write("100", "0")
	h, err := OpenUsageV2(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for i := range usageSlowEvery + 1 {
		u, err := h.Read()
		if err != nil {
			t.Fatal(err)
		}
		wantMem, wantOOM := int64(100), int64(0)
		if i > 0 {
			wantMem = 200
		}
		if i == usageSlowEvery {
			wantOOM = 1
		}
		// The peak between its reads is at least the memory in use.
		if u.Memory != wantMem || u.OOMKills != wantOOM || u.MemoryPeak != wantMem {
			t.Errorf("read %d: memory %d, OOM kills %d, peak %d; want %d, %d, peak %d", i, u.Memory, u.OOMKills, u.MemoryPeak, wantMem, wantOOM, wantMem)
		}
		if i == 0 {
			write("200", "1")
		}
	}
}
