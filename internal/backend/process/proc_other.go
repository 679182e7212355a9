//go:build !linux

package process

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Without /proc (macOS, BSD) ps answers; the start time is ps's lstart turned
// into Unix seconds, which is as unique per pid as /proc's clock ticks.

func readProc(ctx context.Context, pid int) (proc, bool, error) {
	out, err := exec.CommandContext(ctx, "ps", "-o", "ppid=", "-o", "pgid=", "-o", "stat=", "-o", "lstart=", "-p", strconv.Itoa(pid)).Output()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && len(strings.TrimSpace(string(out))) == 0 {
		return proc{}, false, nil // ps exits 1 for an unknown pid
	}
	if err != nil {
		return proc{}, false, fmt.Errorf("ps %d: %w", pid, err)
	}
	f := strings.Fields(string(out))
	if len(f) < 8 {
		return proc{}, false, fmt.Errorf("ps %d: malformed output %q", pid, out)
	}
	ppid, err1 := strconv.Atoi(f[0])
	pgid, err2 := strconv.Atoi(f[1])
	started, err3 := time.ParseInLocation("Mon Jan 2 15:04:05 2006", strings.Join(f[3:8], " "), time.Local)
	if err := errors.Join(err1, err2, err3); err != nil {
		return proc{}, false, fmt.Errorf("ps %d: %w", pid, err)
	}
	return proc{
		PID:     pid,
		PPID:    ppid,
		PGID:    pgid,
		Start:   strconv.FormatInt(started.Unix(), 10),
		Dead:    strings.HasPrefix(f[2], "Z"),
		Stopped: strings.HasPrefix(f[2], "T"),
	}, true, nil
}

// allProcs lists every process (start times are filled in only when a
// process is about to be signalled, by readProc).
func allProcs(ctx context.Context) ([]proc, error) {
	out, err := exec.CommandContext(ctx, "ps", "-A", "-o", "pid=", "-o", "ppid=", "-o", "pgid=").Output()
	if err != nil {
		return nil, fmt.Errorf("ps: %w", err)
	}
	var procs []proc
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		pid, err1 := strconv.Atoi(f[0])
		ppid, err2 := strconv.Atoi(f[1])
		pgid, err3 := strconv.Atoi(f[2])
		if errors.Join(err1, err2, err3) == nil {
			procs = append(procs, proc{PID: pid, PPID: ppid, PGID: pgid})
		}
	}
	return procs, nil
}
