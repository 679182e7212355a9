package process

import (
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/testutil"
)

// newProcess returns a backend on stateDir running the real gateway binary.
func newProcess(t *testing.T, stateDir string) *Process {
	t.Helper()
	return newProcessWith(t, Config{Binary: testutil.GatewayBinary(t), StateDir: stateDir, Instance: "test"})
}

func newProcessWith(t *testing.T, cfg Config) *Process {
	t.Helper()
	p, err := New(cfg, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func pidOf(t *testing.T, info backend.Info) int {
	t.Helper()
	pid, _, err := parseIncarnation(info.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// exists reports whether a process (zombie included) still has this pid.
func exists(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// procList reads a NUL-separated /proc file (cmdline, environ).
func procList(t *testing.T, pid int, name string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + name)
	if err != nil {
		t.Fatalf("read /proc/%d/%s: %v", pid, name, err)
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

// sandboxFiles are the state dir's entries that belong to sandboxes: all
// but the host id table (jail.HostIDs), which is the backend's own.
func sandboxFiles(t *testing.T, stateDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "host-ids") {
			names = append(names, e.Name())
		}
	}
	return names
}
