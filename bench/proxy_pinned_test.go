package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// allowedCPUs is a thread's Cpus_allowed_list.
func allowedCPUs(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s: no Cpus_allowed_list", path)
	return ""
}

// TestPinning: a child started by startOn is born on its CPU while the
// bench's own threads are not; pinProcs moves every thread of a running
// process, and back.
func TestPinning(t *testing.T) {
	t.Parallel()
	last := runtime.NumCPU() - 1
	cmd := exec.Command("sleep", "30")
	if err := startOn(cmd, []int{last}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	if got, want := allowedCPUs(t, status), fmt.Sprint(last); got != want {
		t.Fatalf("child on CPUs %s, want %s", got, want)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if last > 0 && allowedCPUs(t, "/proc/self/task/"+task.Name()+"/status") == fmt.Sprint(last) {
			t.Fatalf("the bench's thread %s stayed pinned", task.Name())
		}
	}
	if err := pinProcs([]int{cmd.Process.Pid}, 0); err != nil {
		t.Fatal(err)
	}
	if got := allowedCPUs(t, status); got != "0" {
		t.Fatalf("after pinProcs to 0: CPUs %s", got)
	}
	if err := pinProcs([]int{cmd.Process.Pid}, allCPUs()...); err != nil {
		t.Fatal(err)
	}
	if got, want := allowedCPUs(t, status), fmt.Sprintf("0-%d", last); last > 0 && got != want {
		t.Fatalf("unpinned: CPUs %s, want %s", got, want)
	}
}
