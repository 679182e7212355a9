package process

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/proctree"
)

// TestTreeUsageSumsTheSandboxTree: a sample counts the leader and every
// descendant (here a child burning CPU under a waiting shell), follows
// nothing else on the host, and fails once the leader is gone.
func TestTreeUsageSumsTheSandboxTree(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sh", "-c", "(while :; do :; done) & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL); _ = cmd.Wait() })
	leader, found, err := proctree.Read(pid)
	if err != nil || !found {
		t.Fatalf("read leader: %v %v", found, err)
	}
	var cpu float64
	var rss int64
	var pids int
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if cpu, rss, pids, err = treeUsage(pid, leader.Start); err != nil {
			t.Fatal(err)
		}
		if (pids == 2 && cpu >= 0.2) || time.Now().After(deadline) {
			break
		}
	}
	if pids != 2 || cpu < 0.2 || rss <= 0 {
		t.Fatalf("usage of shell + burning child: %d processes, %.2f s CPU, %d B resident; want 2, ≥ 0.2 s, > 0", pids, cpu, rss)
	}
	if _, _, _, err := treeUsage(pid, leader.Start+"0"); err == nil {
		t.Fatal("a leader with another start time (a reused pid) was measured")
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = cmd.Wait()
	if _, _, _, err := treeUsage(pid, leader.Start); err == nil {
		t.Fatal("a gone sandbox was measured")
	}
}
