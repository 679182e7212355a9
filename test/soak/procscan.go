package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/jail"
)

// sandboxProc is one live sandbox server process, found in /proc: the
// ground truth for duplicates, independent of the gateway's own state files.
type sandboxProc struct {
	pid    int
	start  string // start time in clock ticks: pid + start is the incarnation
	thread string
}

func (p sandboxProc) incarnation() string { return strconv.Itoa(p.pid) + "-" + p.start }

// scanSandboxes lists the live (not zombie) sandbox servers of bin, with
// the thread each serves. They are isolated: each is its jail's init
// (`sandgate sandbox-init`, bin's image), which serves in-process, and its
// thread is the one whose workspace is the dir at /mnt/user-data/workspace
// in its root. A child the init has forked but not yet exec'd looks the
// same; it is no sandbox, and is told apart by its parent.
func scanSandboxes(bin, dataDir string) ([]sandboxProc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan /proc: %w", err)
	}
	workspaces := threadWorkspaces(dataDir)
	var found []sandboxProc
	parents := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		thread, ok := sandboxThread(pid, bin, workspaces)
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

// fileID is a file's identity, the same through any mount of it.
type fileID struct{ dev, ino uint64 }

func idOf(path string) (fileID, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), st.Ino}, true
}

// threadWorkspaces maps the workspace dirs of dataDir's threads to them.
func threadWorkspaces(dataDir string) map[fileID]string {
	threads := filepath.Join(dataDir, "users", "default", "threads")
	entries, _ := os.ReadDir(threads)
	out := make(map[fileID]string, len(entries))
	for _, e := range entries {
		if id, ok := idOf(filepath.Join(threads, e.Name(), "user-data", "workspace")); ok {
			out[id] = e.Name()
		}
	}
	return out
}

// sandboxThread is the thread pid serves, when it is an isolated sandbox
// server of bin.
func sandboxThread(pid int, bin string, workspaces map[fileID]string) (string, bool) {
	proc := "/proc/" + strconv.Itoa(pid)
	raw, err := os.ReadFile(proc + "/cmdline")
	if err != nil {
		return "", false // exited meanwhile
	}
	argv := strings.Split(string(bytes.TrimRight(raw, "\x00")), "\x00")
	if len(argv) != 2 || argv[0] != "sandgate" || argv[1] != jail.InitCommand {
		return "", false
	}
	if exe, err := os.Readlink(proc + "/exe"); err != nil || exe != bin {
		return "", false
	}
	id, ok := idOf(proc + "/root" + backend.VirtualWorkspace)
	if !ok {
		return "", false
	}
	thread, ok := workspaces[id]
	return thread, ok
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
	thread, ok := sandboxThread(p.pid, bin, threadWorkspaces(dataDir))
	return ok && thread == p.thread
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
