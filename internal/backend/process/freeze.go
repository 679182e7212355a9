//go:build linux

package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandgate/sandgate/internal/jail"
)

// signalFreezer pauses a sandbox that has no freezing cgroup (isolation
// none, or a machine without a cgroup freezer the gateway may use).
const signalFreezer = "SIGSTOP process tree"

// stopTree stops the sandbox whose server is root (live, started at start)
// with SIGSTOP: the server and every descendant. It walks the tree again
// once everything signalled has stopped, until a walk finds no new process:
// a process that forked while the walk ran is caught by the next walk, and
// a stopped process cannot fork, so the last walk is the whole tree (but
// for a child of a fork still under way in an uninterruptible wait, see
// stoppedOrGone: a race the cgroup freezer does not have). In a
// PID namespace the server is the namespace's init (SIGSTOP from the
// gateway's namespace reaches it) and orphans are reparented to it; with
// isolation none, a process that left the tree (daemonised, reparented to
// the host's init) is not reached, as Destroy does not reach it either.
// Should it fail (ctx ended), what it stopped is continued again.
func stopTree(ctx context.Context, root int, start string) error {
	sent := map[int]string{} // pid: start time, of every process signalled
	for {
		tree, err := procTree(ctx, root, start)
		if err != nil {
			return errors.Join(err, continueAll(sent))
		}
		fresh := false
		for _, pr := range tree {
			if s, ok := sent[pr.PID]; ok && s == pr.Start {
				continue
			}
			if err := syscall.Kill(pr.PID, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
				return errors.Join(fmt.Errorf("stop process %d: %w", pr.PID, err), continueAll(sent))
			}
			sent[pr.PID], fresh = pr.Start, true
		}
		if !fresh {
			return nil
		}
		if err := waitStopped(ctx, sent); err != nil {
			return errors.Join(err, continueAll(sent))
		}
	}
}

// contTree continues every process of the sandbox's tree (SIGCONT).
func contTree(ctx context.Context, root int, start string) error {
	tree, err := procTree(ctx, root, start)
	if err != nil {
		return err
	}
	for _, pr := range tree {
		if err := syscall.Kill(pr.PID, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("continue process %d: %w", pr.PID, err)
		}
	}
	return nil
}

// continueAll undoes a stopTree that failed half-way.
func continueAll(sent map[int]string) error {
	var errs []error
	for pid, start := range sent {
		if ok, _ := live(context.Background(), pid, start); ok {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("continue process %d: %w", pid, err))
			}
		}
	}
	return errors.Join(errs...)
}

// waitStopped polls until every process in sent has stopped or is gone.
func waitStopped(ctx context.Context, sent map[int]string) error {
	err := jail.Poll(ctx, func() (bool, error) {
		for pid, start := range sent {
			if !stoppedOrGone(ctx, pid, start) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("wait for the sandbox's processes to stop: %w", err)
	}
	return nil
}

// stoppedOrGone reports whether the process is gone (its pid free or
// someone else's) or none of its threads can run user code: each is
// stopped (a group stop reaches the threads one by one), exited, or in an
// uninterruptible wait. That last one stops as it returns from the kernel;
// waiting for it could take for ever: the parent of a vfork child that
// was stopped before its exec waits so until the child is continued.
func stoppedOrGone(ctx context.Context, pid int, start string) bool {
	pr, found, err := readProc(ctx, pid)
	if err == nil && (!found || pr.Start != start) {
		return true
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	for _, t := range tasks {
		stat, err := readFile(dir + t.Name() + "/stat")
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread exited
		}
		if err != nil {
			return false
		}
		switch taskState(stat) {
		case 'T', 't', 'D', 'Z', 'X':
		default:
			return false
		}
	}
	return true
}

// taskState is the state letter of a stat line (field 3, after the
// command name's last ')'), 0 when malformed.
func taskState(stat []byte) byte {
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2]
	}
	return 0
}

// procTree is root (live, started at start) and its descendants, root
// first, parents before their children. It follows each thread's
// children file, which costs reads in proportion to the tree rather than
// to every process on the host; without it (a kernel built without
// CONFIG_PROC_CHILDREN) it scans /proc (descendants). Either may miss a
// child forked meanwhile: stopTree walks again.
func procTree(ctx context.Context, root int, start string) ([]proc, error) {
	if _, err := os.Stat("/proc/" + strconv.Itoa(root) + "/task/" + strconv.Itoa(root) + "/children"); err != nil {
		tree, err := descendants(ctx, root)
		return append([]proc{{PID: root, Start: start}}, tree...), err
	}
	tree := []proc{{PID: root, Start: start}}
	for i := 0; i < len(tree); i++ {
		for _, pid := range childPIDs(tree[i].PID) {
			pr, found, err := readProc(ctx, pid)
			if err != nil {
				return nil, err
			}
			if found && !pr.Dead && pr.PPID == tree[i].PID {
				tree = append(tree, pr)
			}
		}
	}
	return tree, nil
}

// childPIDs lists the children of every thread of pid; a process that is
// gone has none.
func childPIDs(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		data, err := readFile(dir + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}
