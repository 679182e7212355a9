package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is Linux's USER_HZ, the unit of /proc/PID/stat's CPU times
// (100 on every Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// procStat is what the bench reads from /proc/PID/stat.
type procStat struct {
	ppid int
	pgrp int
	cpu  time.Duration // utime + stime of the process itself (not its children)
}

func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(string(data))
}

// parseProcStat reads one /proc/PID/stat line. The command name may hold
// spaces and parentheses, so fields are counted from the last ')'.
func parseProcStat(line string) (procStat, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("proc stat %.60q: no command name", line)
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state): ppid is field 4, pgrp 5, utime 14, stime 15.
	if len(f) < 13 {
		return procStat{}, fmt.Errorf("proc stat %.60q: %d fields", line, len(f))
	}
	ppid, err0 := strconv.Atoi(f[1])
	pgrp, err1 := strconv.Atoi(f[2])
	utime, err2 := strconv.ParseInt(f[11], 10, 64)
	stime, err3 := strconv.ParseInt(f[12], 10, 64)
	if err0 != nil || err1 != nil || err2 != nil || err3 != nil {
		return procStat{}, fmt.Errorf("proc stat %.60q: bad numbers", line)
	}
	return procStat{ppid: ppid, pgrp: pgrp, cpu: time.Duration(utime+stime) * clockTick}, nil
}

// processCPU is the CPU time one process has used.
func processCPU(pid int) (time.Duration, error) {
	st, err := readProcStat(pid)
	return st.cpu, err
}

// groupCPU is the CPU time used by the live processes of a process group
// (nginx's master and workers, which live as long as the run).
func groupCPU(pgid int) (time.Duration, error) {
	var total time.Duration
	n, err := eachProc(func(_ int, st procStat) bool {
		if st.pgrp != pgid {
			return false
		}
		total += st.cpu
		return true
	})
	if err == nil && n == 0 {
		err = fmt.Errorf("no process in group %d", pgid)
	}
	return total, err
}

// procsWhere lists the live processes whose stat match accepts.
func procsWhere(match func(procStat) bool) ([]int, error) {
	var pids []int
	_, err := eachProc(func(pid int, st procStat) bool {
		if !match(st) {
			return false
		}
		pids = append(pids, pid)
		return true
	})
	return pids, err
}

// eachProc calls f with every live process's stat and counts those it
// accepts (a process gone since the listing is skipped).
func eachProc(f func(pid int, st procStat) bool) (int, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if st, err := readProcStat(pid); err == nil && f(pid, st) {
			n++
		}
	}
	return n, nil
}

// vmRSS is a process's resident set size (VmRSS in /proc/PID/status), in bytes.
func vmRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("VmRSS %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// openFDs is the number of a process's open file descriptors.
func openFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents), err
}
