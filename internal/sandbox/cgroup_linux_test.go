package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// TestCgroupSourceReadsOOMKills reads cgroup files as the kernel writes
// them, in directories made for the test: the OOM kill count is the
// oom_kill line of v2's memory.events and of v1's memory.oom_control (not
// oom, oom_group_kill or oom_kill_disable), 0 when the kernel has no such
// line (before Linux 4.13), and a cgroup without the file is no source.
func TestCgroupSourceReadsOOMKills(t *testing.T) {
	t.Parallel()
	const v2Events = "low 0\nhigh 0\nmax 9\noom 4\noom_kill 2\noom_group_kill 7\n"
	const v1Control = "oom_kill_disable 5\nunder_oom 0\noom_kill 3\n"
	for _, tc := range []struct {
		name    string
		v1      bool
		oomFile string // "" = none written
		want    sandboxspec.Stats
		wantErr bool
	}{
		{"v2", false, v2Events, sandboxspec.Stats{Source: sandboxspec.StatsCgroupV2, CPUSeconds: 1.5, MemoryBytes: 4096, PIDs: 2, OOMKills: 2}, false},
		{"v1", true, v1Control, sandboxspec.Stats{Source: sandboxspec.StatsCgroupV1, CPUSeconds: 1.5, MemoryBytes: 4096, PIDs: 2, OOMKills: 3}, false},
		{"v2 before 4.13", false, "low 0\nhigh 0\nmax 0\noom 0\n", sandboxspec.Stats{Source: sandboxspec.StatsCgroupV2, CPUSeconds: 1.5, MemoryBytes: 4096, PIDs: 2}, false},
		{"v1 before 4.13", true, "oom_kill_disable 0\nunder_oom 0\n", sandboxspec.Stats{Source: sandboxspec.StatsCgroupV1, CPUSeconds: 1.5, MemoryBytes: 4096, PIDs: 2}, false},
		{"v2 no memory.events", false, "", sandboxspec.Stats{}, true},
		{"v1 no memory.oom_control", true, "", sandboxspec.Stats{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			write := func(dir, name, content string) {
				t.Helper()
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var src *cgroupSource
			if tc.v1 {
				cpu, mem := filepath.Join(root, "cpuacct"), filepath.Join(root, "memory")
				write(cpu, "cpuacct.usage", "1500000000\n")
				write(cpu, "cgroup.procs", "1\n7\n")
				write(mem, "memory.usage_in_bytes", "4096\n")
				write(mem, "cgroup.procs", "1\n7\n")
				if tc.oomFile != "" {
					write(mem, "memory.oom_control", tc.oomFile)
				}
				src = v1Source(cpu, mem)
			} else {
				write(root, "cpu.stat", "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
				write(root, "memory.current", "4096\n")
				write(root, "cgroup.procs", "1\n7\n")
				if tc.oomFile != "" {
					write(root, "memory.events", tc.oomFile)
				}
				src = v2Source(root)
			}
			got, err := src.read()
			if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
				t.Errorf("read = %+v, %v; want %+v (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
