package proctree

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	tail := " 0 0 0 0 0 0 0 7 5 2 1 20 0 1 0 98765 0 33" // fields 7..24: utime 7, stime 5, cutime 2, cstime 1, rss 33
	for _, tc := range []struct {
		name string
		line string
		want Proc
		err  bool
	}{
		{"plain", "42 (gateway) S 1 42 42" + tail, Proc{PID: 42, PPID: 1, PGID: 42, Start: "98765", CPUTicks: 12, ChildTicks: 3, RSSPages: 33}, false},
		{"name with spaces and parens", "7 (a b) c) R 3 5 5" + tail, Proc{PID: 7, PPID: 3, PGID: 5, Start: "98765", CPUTicks: 12, ChildTicks: 3, RSSPages: 33}, false},
		{"zombie", "9 (x) Z 1 9 9" + tail, Proc{PID: 9, PPID: 1, PGID: 9, Start: "98765", Dead: true, CPUTicks: 12, ChildTicks: 3, RSSPages: 33}, false},
		{"stopped", "9 (x) T 1 9 9" + tail, Proc{PID: 9, PPID: 1, PGID: 9, Start: "98765", Stopped: true, CPUTicks: 12, ChildTicks: 3, RSSPages: 33}, false},
		{"short", "9 (x) S 1 9", Proc{}, true},
		{"no parens", "9 x S 1 9 9" + tail, Proc{}, true},
		{"bad pid", "x (y) S 1 9 9" + tail, Proc{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseStat([]byte(tc.line + "\n"))
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("ParseStat = %+v, %v; want %+v, err %v", got, err, tc.want, tc.err)
			}
		})
	}
}

// startTree starts a shell whose children and grandchildren fork for
// ever (each loop iteration a new process), killed at cleanup.
func startTree(t *testing.T, script string) Proc {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
		_ = cmd.Wait()
	})
	root, found, err := Read(cmd.Process.Pid)
	if err != nil || !found {
		t.Fatalf("read the tree's root: %v, found %v", err, found)
	}
	return root
}

func pids(tree []Proc) []int {
	var out []int
	for _, p := range tree {
		out = append(out, p.PID)
	}
	slices.Sort(out)
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Tree, which follows the threads' children files, finds the same tree
// as a scan of all /proc: a shell's children and grandchildren.
func TestTree(t *testing.T) {
	t.Parallel()
	root := startTree(t, "sleep 60 & (sleep 60 & sleep 60 & wait) & wait")
	scan := func() []Proc {
		all, err := All()
		if err != nil {
			t.Fatal(err)
		}
		return append(Descendants(all, root.PID), root)
	}
	waitFor(t, "the shells start their sleeps", func() bool { return len(scan()) == 5 })
	got, err := Tree(root.PID, root.Start)
	if err != nil {
		t.Fatal(err)
	}
	if want := pids(scan()); !slices.Equal(pids(got), want) {
		t.Errorf("Tree = %v, want %v", pids(got), want)
	}
	if got[0].PID != root.PID {
		t.Errorf("Tree starts at %d, want the root %d", got[0].PID, root.PID)
	}
	if got, err := Tree(root.PID, root.Start+"0"); err != nil || len(got) != 0 {
		t.Errorf("Tree of a root with another start time = %v, %v; want none", pids(got), err)
	}
}

// Stop stops a tree whose processes fork all the time: after it, every
// process of the tree is stopped (state T), none is left running, and
// Continue runs them all again.
func TestStopContinue(t *testing.T) {
	t.Parallel()
	// Each background loop's subshell leaves a mark before it loops: a
	// tree of three processes can also be the root, one loop and a
	// passing /bin/true, before the root has forked the second loop.
	dir := t.TempDir()
	root := startTree(t, "(: > "+dir+"/a; while :; do /bin/true; done) & (: > "+dir+"/b; while :; do :; done) & "+
		"while :; do /bin/true; done")
	waitFor(t, "the loops start", func() bool {
		_, errA := os.Stat(filepath.Join(dir, "a"))
		_, errB := os.Stat(filepath.Join(dir, "b"))
		return errA == nil && errB == nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	set, err := Stop(ctx, func() ([]Proc, error) { return Tree(root.PID, root.Start) })
	if err != nil {
		t.Fatal(err)
	}
	tree, err := Tree(root.PID, root.Start)
	if err != nil {
		t.Fatal(err)
	}
	if len(tree) < 3 {
		t.Fatalf("stopped tree %v: the loops are not in it", pids(tree))
	}
	for _, p := range tree {
		// A shell that vforks waits, uninterruptibly, for a child stopped
		// before its exec: it runs no code of its own until continued.
		if st := taskState(mustRead(t, p.PID)); st != 'T' && st != 'D' {
			t.Errorf("process %d of the stopped tree is in state %c, want T (or D: a vfork parent)", p.PID, st)
		}
		if set[p.PID] != p.Start {
			t.Errorf("process %d is not in the set Stop returned", p.PID)
		}
	}
	frozen := ticks(tree)
	time.Sleep(500 * time.Millisecond)
	if now := ticks(tree); now != frozen {
		t.Errorf("the stopped tree used CPU: %d ticks, 0.5 s later %d", frozen, now)
	}
	if set[os.Getpid()] != "" {
		t.Error("Stop stopped the test itself")
	}
	if err := Continue(set); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the tree runs again", func() bool {
		tree, _ := Tree(root.PID, root.Start)
		for _, p := range tree {
			if p.Stopped {
				return false
			}
		}
		return len(tree) > 0
	})
}

// A walk that fails makes Stop continue what it had stopped.
func TestStopUndoesOnFailure(t *testing.T) {
	t.Parallel()
	root := startTree(t, "while :; do :; done")
	walks := 0
	_, err := Stop(t.Context(), func() ([]Proc, error) {
		if walks++; walks > 1 {
			return nil, os.ErrDeadlineExceeded
		}
		return Tree(root.PID, root.Start)
	})
	if err == nil {
		t.Fatal("Stop with a failing walk succeeded")
	}
	waitFor(t, "the root runs again", func() bool { p, _, _ := Read(root.PID); return !p.Stopped })
}

func mustRead(t *testing.T, pid int) []byte {
	t.Helper()
	stat, err := ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	return stat
}

// ticks sums the CPU time the processes of tree used, read anew.
func ticks(tree []Proc) uint64 {
	var sum uint64
	for _, p := range tree {
		if now, found, _ := Read(p.PID); found {
			sum += now.CPUTicks
		}
	}
	return sum
}
