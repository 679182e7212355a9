package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// groupStat sums what /proc says about the live members of one process
// group: how many there are, how many of them are stopped, and the CPU
// time (clock ticks) they and their waited-for children used.
type groupStat struct {
	members int
	stopped int
	cpu     uint64
}

// allStopped: every live member is stopped (SIGSTOP, SIGTSTP, a tracer):
// nothing in the group can run until someone outside it continues it.
func (g groupStat) allStopped() bool { return g.members > 0 && g.stopped == g.members }

// procStat is the part of /proc/<pid>/stat that activity needs.
type procStat struct {
	state byte
	pgrp  int
	cpu   uint64 // utime + stime + cutime + cstime
}

// parseProcStat parses one /proc/<pid>/stat line (proc(5)). The command
// name is in parentheses and may itself hold spaces and parentheses (a
// tenant names its processes), so the fields are read after the LAST ')'.
func parseProcStat(line []byte) (procStat, error) {
	i := bytes.LastIndexByte(line, ')')
	if i < 0 {
		return procStat{}, errors.New("proc stat: no command name")
	}
	// After ')': state(3) ppid(4) pgrp(5) session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime(14) stime(15) cutime(16) cstime(17).
	f := bytes.Fields(line[i+1:])
	if len(f) < 15 || len(f[0]) != 1 {
		return procStat{}, errors.New("proc stat: too few fields")
	}
	pgrp, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return procStat{}, fmt.Errorf("proc stat: pgrp: %w", err)
	}
	st := procStat{state: f[0][0], pgrp: pgrp}
	for _, v := range f[11:15] {
		// cutime and cstime are signed in proc(5); never negative in practice.
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("proc stat: cpu time: %w", err)
		}
		st.cpu += uint64(max(n, 0))
	}
	return st, nil
}

// scanGroups reads every process under procRoot (normally /proc) and sums
// the ones whose process group is in want. Processes that exit during the
// scan are skipped; zombies and dead ones are no members (they cannot run).
// An error means /proc cannot be read at all: the caller cannot tell. No
// group wanted, nothing is read: the health check asks every idle sandbox
// every interval, and the walk was most of its answer's cost.
func scanGroups(procRoot string, want map[int]bool) (map[int]groupStat, error) {
	if len(want) == 0 {
		return nil, nil
	}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", procRoot, err)
	}
	out := make(map[int]groupStat, len(want))
	seen := false
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		st, err := parseProcStat(raw)
		if err != nil {
			continue
		}
		seen = true
		if !want[st.pgrp] || st.state == 'Z' || st.state == 'X' || st.state == 'x' {
			continue
		}
		g := out[st.pgrp]
		g.members++
		g.cpu += st.cpu
		if st.state == 'T' || st.state == 't' {
			g.stopped++
		}
		out[st.pgrp] = g
	}
	if !seen { // not a procfs: at least this server's own process is there
		return nil, fmt.Errorf("%s lists no process", procRoot)
	}
	return out, nil
}
