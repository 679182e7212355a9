package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// sandboxProc is one live sandbox server process, found in /proc: the
// ground truth for duplicates, independent of the gateway's own state files.
type sandboxProc struct {
	pid    int
	start  string // start time in clock ticks: pid + start is the incarnation
	thread string
}

func (p sandboxProc) incarnation() string { return strconv.Itoa(p.pid) + "-" + p.start }

// scanSandboxes lists the live (not zombie) `gateway sandbox` processes of
// bin, with the thread each serves (from its workspace mapping). A child a
// sandbox server has forked but not yet exec'd shows its parent's command
// line; it is no sandbox, and is told apart by its parent.
func scanSandboxes(bin, dataDir string) ([]sandboxProc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan /proc: %w", err)
	}
	var found []sandboxProc
	parents := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		thread, ok := sandboxThread(pid, bin, dataDir)
		if !ok {
			continue
		}
		st, ok := readStat(pid)
		if !ok {
			continue
		}
		parents[pid] = st.ppid
		found = append(found, sandboxProc{pid: pid, start: st.start, thread: thread})
	}
	out := found[:0]
	for _, p := range found {
		if _, forked := parents[parents[p.pid]]; !forked {
			out = append(out, p)
		}
	}
	return out, nil
}

// sandboxThread reads pid's command line: the thread, when it is a sandbox
// server of bin.
func sandboxThread(pid int, bin, dataDir string) (string, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return "", false // exited meanwhile
	}
	argv := strings.Split(string(bytes.TrimRight(raw, "\x00")), "\x00")
	if len(argv) < 2 || argv[0] != bin || argv[1] != "sandbox" {
		return "", false
	}
	prefix := "/mnt/user-data/workspace=" + filepath.Join(dataDir, "users", "default", "threads") + "/"
	for _, a := range argv {
		if rest, ok := strings.CutPrefix(a, prefix); ok {
			thread, _, _ := strings.Cut(rest, "/")
			return thread, thread != ""
		}
	}
	return "", false
}

type stat struct {
	ppid  int
	start string // clock ticks after boot
}

// readStat reads pid's parent and start time; false when it is gone or a zombie.
func readStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	// Fields after the parenthesised command name (which may hold spaces):
	// state is field 3, ppid field 4, starttime field 22.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return stat{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return stat{}, false
	}
	return stat{ppid: ppid, start: f[19]}, true
}

// stillRuns reports whether p is alive as the same incarnation and still
// a sandbox server (not a forked child that has exec'd something else since).
func stillRuns(p sandboxProc, bin, dataDir string) bool {
	st, ok := readStat(p.pid)
	if !ok || st.start != p.start {
		return false
	}
	thread, ok := sandboxThread(p.pid, bin, dataDir)
	return ok && thread == p.thread
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
