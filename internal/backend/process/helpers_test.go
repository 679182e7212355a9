package process

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
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

// threadSpec is a spec with the thread's real mounts under dataDir.
func threadSpec(t *testing.T, dataDir, user, thread string) backend.Spec {
	t.Helper()
	mounts, err := backend.ThreadMounts(backend.MountConfig{DataDir: dataDir}, user, thread)
	if err != nil {
		t.Fatalf("ThreadMounts: %v", err)
	}
	return backend.Spec{SandboxID: identity.SandboxID(user, thread), User: user, Thread: thread, Mounts: mounts}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustCreate creates a sandbox and destroys it when the test ends.
func mustCreate(t *testing.T, p *Process, spec backend.Spec) backend.Info {
	t.Helper()
	info, err := p.Create(testCtx(t), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		_ = p.Destroy(context.Background(), backend.Info{SandboxID: info.SandboxID, Incarnation: info.Incarnation})
	})
	return info
}

func pidOf(t *testing.T, info backend.Info) int {
	t.Helper()
	pid, _, err := parseIncarnation(info.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// eventually polls cond until it holds or a few seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// exists reports whether a process (zombie included) still has this pid.
func exists(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url + "/v1/sandbox")
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
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
