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
)

// readProc reads /proc/<pid>/stat. found is false when no such process exists.
func readProc(_ context.Context, pid int) (proc, bool, error) {
	data, err := readFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return proc{}, false, nil
	}
	if err != nil {
		return proc{}, false, fmt.Errorf("read process %d: %w", pid, err)
	}
	p, err := parseStat(data)
	if err != nil {
		return proc{}, false, fmt.Errorf("process %d: %w", pid, err)
	}
	return p, true, nil
}

// parseStat parses a /proc/<pid>/stat line. The command name (field 2) is in
// parentheses and may itself hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseStat(data []byte) (proc, error) {
	open := bytes.IndexByte(data, '(')
	end := bytes.LastIndexByte(data, ')')
	if open < 1 || end < open {
		return proc{}, errors.New("malformed stat")
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data[:open])))
	if err != nil {
		return proc{}, fmt.Errorf("malformed stat pid: %w", err)
	}
	// After ')': field 3 (state) is index 0, so field N is index N-3.
	f := strings.Fields(string(data[end+1:]))
	if len(f) < 20 {
		return proc{}, errors.New("short stat")
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	if err := errors.Join(err1, err2); err != nil {
		return proc{}, fmt.Errorf("malformed stat: %w", err)
	}
	return proc{
		PID:     pid,
		PPID:    ppid,
		PGID:    pgid,
		Start:   f[19],                      // field 22: start time in clock ticks after boot
		Dead:    f[0] == "Z" || f[0] == "X", // zombie or exiting: gone for our purposes
		Stopped: f[0] == "T",
	}, nil
}

// allProcs lists every process on the host; entries that vanish mid-scan
// are skipped.
func allProcs(_ context.Context) ([]proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	out := make([]proc, 0, len(entries))
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if p, err := parseStat(data); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}
