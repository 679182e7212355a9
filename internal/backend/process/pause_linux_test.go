package process

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/jail"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/testutil"
)

// TestPauseResume pauses a real sandbox that burns CPU, each way the
// backend pauses one: every process of it stops using CPU, and is frozen
// by its cgroup or stopped by SIGSTOP; resumed, it runs and answers again
// with its memory intact; Discover and Create resume a paused one rather
// than take it for hung; and Destroy kills a paused one at once.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	bin := testutil.GatewayBinary(t)
	for _, tc := range []struct {
		name   string
		cfg    Config
		method string
		thread string // each its own sandbox id: cgroups are named by it
	}{
		{"isolated, cgroup freezer", Config{}, cgroupFreezer, "cgroup"},
		{"isolated, SIGSTOP", Config{signalFreeze: true}, signalFreezer, "signal"},
		{"isolation none, SIGSTOP", Config{Isolation: IsolationNone}, signalFreezer, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			cfg.Binary, cfg.StateDir, cfg.Instance = bin, t.TempDir(), "test"
			p := newProcessWith(t, cfg)
			if tc.method == cgroupFreezer {
				testutil.Require(t, p.freezeMethod() == cgroupFreezer, "a cgroup freezer (v2, or v1's freezer hierarchy) writable by root")
			} else if got := p.freezeMethod(); got != tc.method {
				t.Fatalf("freeze method %q, want %q", got, tc.method)
			}
			isolated := cfg.Isolation != IsolationNone
			ctx := backendtest.Ctx(t)
			spec := backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "fay", "freeze-"+tc.thread)
			info := backendtest.MustCreate(t, p, spec)
			pid := pidOf(t, info)

			// State in memory before the pause: the default session's
			// environment (the server's), and a file in the isolated
			// sandbox's own /tmp (a tmpfs).
			backendtest.Exec(t, info, "export FREEZE_MARK=kept-42")
			if isolated {
				backendtest.Exec(t, info, "echo kept-tmp > /tmp/freeze-mark")
			}
			burn(t, info)
			start := treeTicks(t, pid)
			backendtest.Eventually(t, "the sandbox burns CPU", func() bool { return treeTicks(t, pid) > start+20 })

			for range 2 { // idempotent
				if err := p.Freeze(ctx, info); err != nil {
					t.Fatalf("Pause: %v", err)
				}
			}
			tree := sandboxTree(t, pid)
			if len(tree) < 2 { // the server and the burning shell at least
				t.Fatalf("sandbox tree %+v: the burning command is not in it", tree)
			}
			if tc.method == cgroupFreezer {
				checkCgroupFrozen(t, p, pid)
			} else {
				for _, pr := range tree {
					if st := procState(t, pr.PID); st != 'T' {
						t.Errorf("process %d of the paused sandbox is in state %c, want T (stopped)", pr.PID, st)
					}
				}
			}
			frozen := treeTicks(t, pid)
			time.Sleep(2 * time.Second)
			if now := treeTicks(t, pid); now != frozen {
				t.Errorf("paused sandbox used CPU: %d ticks, 2 s later %d", frozen, now)
			}
			if ok, err := p.Alive(ctx, info); !ok || err != nil {
				t.Errorf("paused sandbox Alive = %v, %v; want alive", ok, err)
			}

			for range 2 {
				if err := p.Thaw(ctx, info); err != nil {
					t.Fatalf("Resume: %v", err)
				}
			}
			backendtest.Eventually(t, "the resumed sandbox burns CPU", func() bool { return treeTicks(t, pid) > frozen+20 })
			if code := backendtest.Status(t, info.URL, info.Secret); code != http.StatusOK {
				t.Fatalf("resumed sandbox answers %d", code)
			}
			if got := backendtest.Exec(t, info, `echo "$FREEZE_MARK"`).Output; strings.TrimSpace(got) != "kept-42" {
				t.Errorf("session variable after Resume = %q, want kept-42", got)
			}
			if isolated {
				if got := backendtest.Exec(t, info, "cat /tmp/freeze-mark").Output; strings.TrimSpace(got) != "kept-tmp" {
					t.Errorf("/tmp file after Resume = %q, want kept-tmp", got)
				}
			}

			// A paused sandbox found again (the pool lost its record) is
			// resumed and handed out, not taken for hung and replaced.
			for _, find := range []struct {
				name string
				call func() (backend.Info, error)
			}{
				{"Discover", func() (backend.Info, error) {
					got, ok, err := p.Discover(ctx, info.SandboxID)
					if !ok && err == nil {
						t.Error("Discover of a paused sandbox: not found")
					}
					return got, err
				}},
				{"Create", func() (backend.Info, error) { return p.Create(ctx, spec) }},
			} {
				if err := p.Freeze(ctx, info); err != nil {
					t.Fatal(err)
				}
				began := time.Now()
				got, err := find.call()
				if err != nil || got.Incarnation != info.Incarnation {
					t.Fatalf("%s of a paused sandbox = %s, %v; want incarnation %s", find.name, got.Incarnation, err, info.Incarnation)
				}
				if took := time.Since(began); took > discoverReadyTimeout {
					t.Errorf("%s of a paused sandbox took %v", find.name, took)
				}
				if code := backendtest.Status(t, info.URL, info.Secret); code != http.StatusOK {
					t.Errorf("sandbox after %s answers %d", find.name, code)
				}
			}

			// Destroy of a paused sandbox: at once, and nothing left.
			if err := p.Freeze(ctx, info); err != nil {
				t.Fatal(err)
			}
			tree = sandboxTree(t, pid)
			cgroup := freezerDir(t, p, pid)
			began := time.Now()
			if err := p.Destroy(ctx, info); err != nil {
				t.Fatalf("Destroy of a paused sandbox: %v", err)
			}
			t.Logf("Destroy of a paused sandbox took %v", time.Since(began))
			if took := time.Since(began); took > termGrace/2 {
				t.Errorf("Destroy of a paused sandbox took %v, want well under the %v grace", took, termGrace)
			}
			for _, pr := range tree {
				if ok, _ := live(ctx, pr.PID, pr.Start); ok {
					t.Errorf("process %d of the destroyed sandbox still runs", pr.PID)
				}
			}
			if cgroup != "" && fileExists(cgroup) {
				t.Errorf("cgroup %s of the destroyed sandbox left behind", cgroup)
			}
			if fileExists(p.pausedPath(info.SandboxID)) {
				t.Error("the destroyed sandbox is still marked paused")
			}
			if err := p.Freeze(ctx, info); err == nil {
				t.Error("Pause of a destroyed sandbox succeeded")
			}
		})
	}
}

// burn starts a command that burns CPU for ever, in a session of its own.
func burn(t *testing.T, info backend.Info) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"command": "while :; do :; done", "async_mode": true})
	client, base := backend.Client(info.URL)
	req, err := http.NewRequestWithContext(backendtest.Ctx(t), http.MethodPost, base+"/v1/bash/exec", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(sandboxspec.SecretHeader, info.Secret)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"running"`) {
		t.Fatalf("start the burning command: %d %s", resp.StatusCode, out)
	}
}

// sandboxTree is the sandbox's server and every descendant, found by a
// scan of /proc (descendants), not the walk the backend pauses by.
func sandboxTree(t *testing.T, pid int) []proc {
	t.Helper()
	root, found, err := readProc(t.Context(), pid)
	if err != nil || !found {
		t.Fatalf("sandbox server %d: %v, found %v", pid, err, found)
	}
	tree, err := descendants(t.Context(), pid)
	if err != nil {
		t.Fatal(err)
	}
	return append(tree, root)
}

// treeTicks sums user and system CPU time (clock ticks) of the tree.
func treeTicks(t *testing.T, pid int) int {
	t.Helper()
	sum := 0
	for _, pr := range sandboxTree(t, pid) {
		f := statFields(t, pr.PID)
		if f == nil {
			continue // exited meanwhile
		}
		utime, err1 := strconv.Atoi(f[11])
		stime, err2 := strconv.Atoi(f[12])
		if err1 != nil || err2 != nil {
			t.Fatalf("stat of %d: %q", pr.PID, f)
		}
		sum += utime + stime
	}
	return sum
}

func procState(t *testing.T, pid int) byte {
	t.Helper()
	if f := statFields(t, pid); f != nil {
		return f[0][0]
	}
	return 0
}

// statFields is /proc/<pid>/stat after the command name (field N at
// N-3), nil once the process is gone.
func statFields(t *testing.T, pid int) []string {
	t.Helper()
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	return strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
}

// freezerDir is the host path of the freezing cgroup the kernel lists
// for pid (/proc/<pid>/cgroup), when it is a sandbox's own; "" if none.
func freezerDir(t *testing.T, p *Process, pid int) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.Contains(parts[2], "/sandgate/") {
			continue
		}
		switch {
		case p.cgroups.Mode() == jail.CgroupV2 && parts[0] == "0":
			return filepath.Join("/sys/fs/cgroup", parts[2])
		case p.cgroups.Mode() == jail.CgroupV1 && parts[1] == "freezer":
			return filepath.Join("/sys/fs/cgroup/freezer", parts[2])
		}
	}
	return ""
}

// checkCgroupFrozen asks the kernel whether the sandbox's cgroup is
// frozen: cgroup.events (v2) or freezer.state (v1).
func checkCgroupFrozen(t *testing.T, p *Process, pid int) {
	t.Helper()
	dir := freezerDir(t, p, pid)
	if dir == "" {
		t.Fatalf("sandbox %d has no freezing cgroup of its own", pid)
	}
	file, want := "cgroup.events", "frozen 1"
	if p.cgroups.Mode() == jail.CgroupV1 {
		file, want = "freezer.state", "FROZEN"
	}
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains("\n"+string(data), "\n"+want+"\n") {
		t.Errorf("%s of the paused sandbox is %q, want %q", file, data, want)
	}
}
