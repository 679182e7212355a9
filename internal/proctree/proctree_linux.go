package proctree

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
	"time"
)

// ClockTicks is the unit of CPUTicks: Linux reports CPU times in USER_HZ,
// 100 on every architecture Go runs on.
const ClockTicks = 100

// Read reads /proc/<pid>/stat. found is false when no such process exists.
func Read(pid int) (p Proc, found bool, err error) {
	data, err := ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return Proc{}, false, nil
	}
	if err != nil {
		return Proc{}, false, fmt.Errorf("read process %d: %w", pid, err)
	}
	if p, err = ParseStat(data); err != nil {
		return Proc{}, false, fmt.Errorf("process %d: %w", pid, err)
	}
	return p, true, nil
}

// ParseStat parses a /proc/<pid>/stat line (proc(5)). The command name
// (field 2) is in parentheses and may itself hold spaces and parentheses
// (a tenant names its processes), so fields are counted from the last ')'.
func ParseStat(data []byte) (Proc, error) {
	open := bytes.IndexByte(data, '(')
	end := bytes.LastIndexByte(data, ')')
	if open < 1 || end < open {
		return Proc{}, errors.New("malformed stat")
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data[:open])))
	if err != nil {
		return Proc{}, fmt.Errorf("malformed stat pid: %w", err)
	}
	// After ')': field 3 (state) is index 0, so field N is index N-3.
	f := strings.Fields(string(data[end+1:]))
	if len(f) < 22 {
		return Proc{}, errors.New("short stat")
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	utime, err3 := strconv.ParseUint(f[11], 10, 64)
	stime, err4 := strconv.ParseUint(f[12], 10, 64)
	cutime, err5 := strconv.ParseInt(f[13], 10, 64)
	cstime, err6 := strconv.ParseInt(f[14], 10, 64)
	rss, err7 := strconv.ParseInt(f[21], 10, 64)
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		return Proc{}, fmt.Errorf("malformed stat: %w", err)
	}
	return Proc{
		PID:      pid,
		PPID:     ppid,
		PGID:     pgid,
		Start:    f[19], // field 22: start time in clock ticks after boot
		Dead:     f[0] == "Z" || f[0] == "X",
		Stopped:  f[0] == "T",
		CPUTicks: utime + stime, // fields 14, 15
		// Fields 16, 17: signed in proc(5), never negative in practice.
		ChildTicks: uint64(max(cutime, 0) + max(cstime, 0)),
		RSSPages:   rss, // field 24
	}, nil
}

// All lists every process in this PID namespace's /proc; entries that
// vanish mid-scan are skipped.
func All() ([]Proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	out := make([]Proc, 0, len(entries))
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if p, found, err := Read(atoi(e.Name())); err == nil && found {
			out = append(out, p)
		}
	}
	return out, nil
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// Live reports whether pid runs and is still the process that started at
// start (a pid reused by an unrelated process is not live).
func Live(pid int, start string) (bool, error) {
	p, found, err := Read(pid)
	if err != nil || !found {
		return false, err
	}
	return !p.Dead && p.Start == start, nil
}

// Tree is root, when it is still the process that started at start, and
// its live descendants: root first, parents before their children; empty
// when root is gone. It follows each thread's children file, which costs
// reads in proportion to the tree rather than to every process on the
// host; without it (a kernel built without CONFIG_PROC_CHILDREN) it scans
// /proc. Either may miss a child forked meanwhile: Stop walks again.
func Tree(root int, start string) ([]Proc, error) {
	r, found, err := Read(root)
	if err != nil || !found || r.Dead || r.Start != start {
		return nil, err
	}
	tree := []Proc{r}
	if _, err := os.Stat("/proc/" + strconv.Itoa(root) + "/task/" + strconv.Itoa(root) + "/children"); err != nil {
		all, err := All()
		if err != nil {
			return nil, err
		}
		for _, p := range Descendants(all, root) {
			if !p.Dead {
				tree = append(tree, p)
			}
		}
		return tree, nil
	}
	for i := 0; i < len(tree); i++ {
		for _, pid := range childPIDs(tree[i].PID) {
			p, found, err := Read(pid)
			if err != nil {
				return nil, err
			}
			if found && !p.Dead && p.PPID == tree[i].PID {
				tree = append(tree, p)
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
		data, err := ReadFile(dir + t.Name() + "/children")
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

// Stop stops with SIGSTOP every process walk lists, and returns them. It
// walks again once everything signalled has stopped, until a walk lists no
// process it has not stopped: a process that forked while the walk ran is
// caught by the next walk, and a stopped process cannot fork, so the last
// walk is the whole tree (but for a child of a fork still under way in an
// uninterruptible wait, see stoppedOrGone: a race a cgroup freezer does
// not have). Should it fail (ctx ended, a signal refused), it continues
// what it stopped and returns the error.
func Stop(ctx context.Context, walk func() ([]Proc, error)) (Set, error) {
	sent := Set{}
	undo := func(err error) (Set, error) { return nil, errors.Join(err, Continue(sent)) }
	for {
		if err := ctx.Err(); err != nil {
			return undo(fmt.Errorf("stop processes: %w", err))
		}
		procs, err := walk()
		if err != nil {
			return undo(err)
		}
		fresh := false
		for _, p := range procs {
			if s, ok := sent[p.PID]; ok && s == p.Start {
				continue
			}
			if err := syscall.Kill(p.PID, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
				return undo(fmt.Errorf("stop process %d: %w", p.PID, err))
			}
			sent[p.PID], fresh = p.Start, true
		}
		if !fresh {
			return sent, nil
		}
		if err := waitStopped(ctx, sent); err != nil {
			return undo(err)
		}
	}
}

// Continue continues (SIGCONT) every process of set that is still the one
// put in it; the others are gone, which is no error.
func Continue(set Set) error {
	var errs []error
	for pid, start := range set {
		if ok, _ := Live(pid, start); ok {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("continue process %d: %w", pid, err))
			}
		}
	}
	return errors.Join(errs...)
}

// waitStopped polls until every process in set has stopped or is gone: a
// stop lands when the process is next scheduled, in microseconds on an
// idle machine.
func waitStopped(ctx context.Context, set Set) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for pid, start := range set {
		for !stoppedOrGone(pid, start) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("wait for the processes to stop: %w", ctx.Err())
			case <-tick.C:
			}
		}
	}
	return nil
}

// stoppedOrGone reports whether the process is gone (its pid free or
// someone else's) or none of its threads can run user code: each is
// stopped (a group stop reaches the threads one by one), exited, or in an
// uninterruptible wait. That last one stops as it returns from the kernel;
// waiting for it could take for ever: the parent of a vfork child that
// was stopped before its exec waits so until the child is continued.
func stoppedOrGone(pid int, start string) bool {
	p, found, err := Read(pid)
	if err == nil && (!found || p.Start != start) {
		return true
	}
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	for _, t := range tasks {
		stat, err := ReadFile(dir + t.Name() + "/stat")
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
