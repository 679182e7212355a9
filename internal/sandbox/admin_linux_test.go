package sandbox

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/testutil"
)

// pstat is what the tests read of /proc/<pid>/stat themselves, apart from
// the proctree package the server uses.
type pstat struct {
	pid, ppid int
	comm      string
	state     byte
	ticks     int // utime + stime
}

func readPstat(pid int) (pstat, bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return pstat{}, false
	}
	open, end := bytes.IndexByte(raw, '('), bytes.LastIndexByte(raw, ')')
	f := strings.Fields(string(raw[end+1:])) // field N at N-3
	ppid, _ := strconv.Atoi(f[1])
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return pstat{pid: pid, ppid: ppid, comm: string(raw[open+1 : end]), state: f[0][0], ticks: utime + stime}, true
}

// hostTree is root's live descendants (root excluded), from a scan of
// the host's /proc.
func hostTree(root int) []pstat {
	ents, _ := os.ReadDir("/proc")
	children := map[int][]pstat{}
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if p, ok := readPstat(pid); ok && p.state != 'Z' {
				children[p.ppid] = append(children[p.ppid], p)
			}
		}
	}
	var out []pstat
	for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

func treeTicks(tree []pstat) map[int]int {
	out := map[int]int{}
	for _, p := range tree {
		if now, ok := readPstat(p.pid); ok {
			out[p.pid] = now.ticks
		}
	}
	return out
}

// binCall sends a request with secret to a sandbox server process.
func binCall(t *testing.T, srv *testutil.SandboxServer, secret, method, path string, body any) apiResp {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(sandboxspec.SecretHeader, secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	out := apiResp{Body: string(raw)}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: not JSON (%d): %s", method, path, res.StatusCode, raw)
	}
	out.Status = res.StatusCode
	return out
}

func binData[T any](t *testing.T, srv *testutil.SandboxServer, method, path string, body any) T {
	t.Helper()
	r := binCall(t, srv, srv.Secret, method, path, body)
	if r.Status != http.StatusOK || !r.Success {
		t.Fatalf("%s %s: %d %s", method, path, r.Status, r.Body)
	}
	var v T
	if err := json.Unmarshal(r.Data, &v); err != nil {
		t.Fatalf("%s %s: %v: %s", method, path, err, r.Body)
	}
	return v
}

// burnLoop is a shell loop that burns CPU for ever.
const burnLoop = "sh -c 'while :; do :; done'"

// TestFreezeThaw freezes a real sandbox server process that runs a
// CPU-burning command with a background child, a child in a session of
// its own and one its tenant stopped itself, both ways the server tells
// its sandbox's processes: as its launcher's child (its descendants) and
// as PID 1 of a PID namespace (every process there, so a daemonised one
// that was reparented to it too). Frozen, every one of them is stopped
// (state T in /proc) and uses no CPU, while the server and a process of
// the test's own run on and the server answers; thawed, they run again,
// but for the one the tenant stopped.
func TestFreezeThaw(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		wrapper []string
		extra   string // more of the command
	}{
		{"descendants", nil, ""},
		{"PID 1 of a PID namespace", []string{"unshare", "--pid", "--fork", "--mount-proc", "--kill-child"},
			"(" + burnLoop + " &); "}, // daemonised: reparented to the server
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.wrapper != nil {
				_, err := exec.LookPath("unshare")
				testutil.Require(t, err == nil && os.Geteuid() == 0, "root and unshare(1), for a PID namespace")
			}
			srv := testutil.StartSandboxServer(t, tc.wrapper...)
			server := srv.PID
			if tc.wrapper != nil { // the server is unshare's child
				kids := hostTree(srv.PID)
				if len(kids) == 0 {
					t.Fatal("unshare has no child")
				}
				server = kids[0].pid
			}
			t.Cleanup(func() { // a child in a session of its own escapes the server's stop
				for _, p := range hostTree(server) {
					_ = syscall.Kill(p.pid, syscall.SIGKILL)
				}
			})
			outsider := exec.Command("/bin/sh", "-c", "while :; do :; done")
			if err := outsider.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = outsider.Process.Kill(); _ = outsider.Wait() })

			cmd := "sleep 300 & kill -STOP $!; " + burnLoop + " & setsid " + burnLoop + " & " + tc.extra + "while :; do :; done"
			binData[shellResult](t, srv, http.MethodPost, "/v1/shell/exec", map[string]any{"command": cmd, "async_mode": true})
			burners := 3 + strings.Count(tc.extra, burnLoop) // the command's shell and its loops
			var tenantStopped int
			eventually(t, 10*time.Second, "the command's processes burn CPU", func() bool {
				n := 0
				for _, p := range hostTree(server) {
					if p.state == 'T' { // the sleep, or its shell stopped before its exec
						tenantStopped = p.pid
					}
					if p.ticks > 0 && p.state == 'R' {
						n++
					}
				}
				return n >= burners && tenantStopped != 0
			})

			var fr sandboxspec.Freeze
			for range 2 { // idempotent
				fr = binData[sandboxspec.Freeze](t, srv, http.MethodPost, sandboxspec.FreezePath, nil)
				if !fr.Frozen || fr.Processes < burners {
					t.Fatalf("freeze answered %+v", fr)
				}
			}
			tree := hostTree(server)
			for _, p := range tree {
				if now, _ := readPstat(p.pid); now.state != 'T' {
					t.Errorf("process %d (%s) of the frozen sandbox is in state %c, want T", p.pid, p.comm, now.state)
				}
			}
			for _, pid := range []int{server, outsider.Process.Pid} {
				if p, _ := readPstat(pid); p.state == 'T' {
					t.Errorf("process %d (%s), not the sandbox's, was stopped", pid, p.comm)
				}
			}
			// Served while frozen: the stopped commands are no busy ones.
			if a := binData[sandboxspec.Activity](t, srv, http.MethodGet, sandboxspec.ActivityPath, nil); a.Commands != 0 || a.Stalled == 0 {
				t.Errorf("activity of the frozen sandbox = %+v, want its commands stalled", a)
			}
			before, outBefore := treeTicks(tree), treeTicks([]pstat{{pid: outsider.Process.Pid}})
			time.Sleep(2 * time.Second)
			if after := treeTicks(tree); !maps.Equal(before, after) {
				t.Errorf("the frozen sandbox used CPU: %v, 2 s later %v", before, after)
			}
			if outAfter := treeTicks([]pstat{{pid: outsider.Process.Pid}}); outAfter[outsider.Process.Pid] <= outBefore[outsider.Process.Pid] {
				t.Errorf("the test's own process was stopped too: %v, 2 s later %v", outBefore, outAfter)
			}

			for range 2 {
				fr = binData[sandboxspec.Freeze](t, srv, http.MethodPost, sandboxspec.ThawPath, nil)
				if fr.Frozen {
					t.Fatalf("thaw answered %+v", fr)
				}
			}
			eventually(t, 10*time.Second, "the thawed sandbox burns CPU", func() bool {
				after := treeTicks(tree)
				for _, p := range tree {
					if p.pid != tenantStopped && after[p.pid] <= before[p.pid] {
						return false
					}
				}
				return true
			})
			if p, _ := readPstat(tenantStopped); p.state != 'T' {
				t.Errorf("the thaw continued the process its tenant had stopped (state %c)", p.state)
			}
		})
	}
}

// TestFreezeNeedsTheSecret: the new routes are behind the sandbox secret
// like every other.
func TestFreezeNeedsTheSecret(t *testing.T) {
	t.Parallel()
	srv := testutil.StartSandboxServer(t)
	for _, route := range [][2]string{{http.MethodPost, sandboxspec.FreezePath}, {http.MethodPost, sandboxspec.ThawPath}, {http.MethodGet, sandboxspec.StatsPath}} {
		if r := binCall(t, srv, "wrong-"+srv.Secret, route[0], route[1], nil); r.Status != http.StatusUnauthorized || r.Success {
			t.Errorf("%s %s with a wrong secret: %d %s", route[0], route[1], r.Status, r.Body)
		}
	}
}

// TestStats: the server's figures, from /proc here (its launcher's cgroup
// is not its own), grow with a command that burns CPU and keep the CPU
// time of one that ended (reaped, it is its parent's).
func TestStats(t *testing.T) {
	t.Parallel()
	srv := testutil.StartSandboxServer(t)
	t.Cleanup(func() {
		for _, p := range hostTree(srv.PID) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	stats := func() sandboxspec.Stats {
		return binData[sandboxspec.Stats](t, srv, http.MethodGet, sandboxspec.StatsPath, nil)
	}
	s0 := stats()
	if s0.Source != sandboxspec.StatsProc || s0.MemoryBytes <= 0 || s0.PIDs < 1 {
		t.Fatalf("stats of an idle server = %+v, want from /proc, memory and the server", s0)
	}
	// A command that burns half a second of CPU (its own stat says) and ends.
	burnHalf := `awk 'BEGIN { do { getline l < "/proc/self/stat"; close("/proc/self/stat"); split(l, f, " ") } while (f[14] + f[15] < 50) }'`
	binData[shellResult](t, srv, http.MethodPost, "/v1/shell/exec", map[string]any{"command": burnHalf})
	s1 := stats()
	if s1.CPUSeconds < s0.CPUSeconds+0.5 {
		t.Errorf("after a command burnt half a second and ended: %v CPU seconds, before %v", s1.CPUSeconds, s0.CPUSeconds)
	}
	binData[shellResult](t, srv, http.MethodPost, "/v1/shell/exec", map[string]any{"command": burnLoop + " & " + burnLoop, "async_mode": true})
	var s2 sandboxspec.Stats
	eventually(t, 10*time.Second, "CPU seconds grow with a burning command", func() bool {
		s2 = stats()
		return s2.CPUSeconds >= s1.CPUSeconds+1
	})
	if s2.PIDs < s0.PIDs+2 || s2.MemoryBytes <= 0 {
		t.Errorf("stats of a server with a running command = %+v, idle %+v", s2, s0)
	}
	if n := len(hostTree(srv.PID)) + 1; s2.PIDs > n+2 || s2.PIDs < n-2 {
		t.Errorf("stats count %d processes, /proc %d", s2.PIDs, n)
	}
}

// TestStatsFromOwnCgroup runs the server in a cgroup made for it (as the
// process backend's isolated sandbox is, or a container): the stats are
// that cgroup's, grow with a command that burns CPU, and count the OOM
// kill of a command that holds more than the cgroup's memory limit.
func TestStatsFromOwnCgroup(t *testing.T) {
	t.Parallel()
	name := "sandgate-stats-test-" + strconv.Itoa(os.Getpid())
	var dirs []string // cgroups to make, the CPU one first
	source, limit := sandboxspec.StatsCgroupV1, "memory.limit_in_bytes"
	if _, err := os.Stat(cgroupMount + "/cgroup.controllers"); err == nil {
		dirs, source, limit = []string{cgroupMount + "/" + name}, sandboxspec.StatsCgroupV2, "memory.max"
	} else {
		dirs = []string{cgroupMount + "/cpuacct/" + name, cgroupMount + "/memory/" + name}
	}
	made := true
	for _, d := range dirs {
		made = made && os.Mkdir(d, 0o755) == nil
	}
	t.Cleanup(func() { // after the server stopped: an empty cgroup can go
		for _, d := range dirs {
			for deadline := time.Now().Add(5 * time.Second); os.Remove(d) != nil && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	testutil.Require(t, made, "a writable cgroup v1 cpuacct and memory hierarchy, or cgroup v2 (root)")
	var procs []string
	for _, d := range dirs {
		procs = append(procs, d+"/cgroup.procs")
	}
	wrapper := []string{"sh", "-c", `for f in ` + strings.Join(procs, " ") + `; do echo $$ > $f || exit 1; done; exec "$@"`, "sh"}
	srv := testutil.StartSandboxServer(t, wrapper...)
	t.Cleanup(func() {
		for _, p := range hostTree(srv.PID) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	})
	stats := func() sandboxspec.Stats {
		return binData[sandboxspec.Stats](t, srv, http.MethodGet, sandboxspec.StatsPath, nil)
	}
	s0 := stats()
	if s0.Source != source || s0.MemoryBytes <= 0 || s0.PIDs < 1 {
		t.Fatalf("stats of a server in a cgroup of its own = %+v, want %s", s0, source)
	}
	binData[shellResult](t, srv, http.MethodPost, "/v1/shell/exec", map[string]any{"command": burnLoop, "async_mode": true})
	var s1 sandboxspec.Stats
	eventually(t, 10*time.Second, "CPU seconds grow with a burning command", func() bool {
		s1 = stats()
		return s1.CPUSeconds >= s0.CPUSeconds+1
	})
	raw, err := os.ReadFile(procs[0])
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(raw))); s1.Source != source || s1.PIDs < s0.PIDs+1 || s1.PIDs > n+2 || s1.PIDs < n-2 {
		t.Errorf("stats with a running command = %+v (idle %+v); the cgroup holds %d processes", s1, s0, n)
	}

	// 256 MiB held by tail in a cgroup limited to 64 MiB: the OOM killer
	// ends tail, the server and its shell go on.
	if s1.OOMKills != 0 {
		t.Fatalf("OOM kills before any: %+v", s1)
	}
	if err := os.WriteFile(filepath.Join(dirs[len(dirs)-1], limit), []byte("67108864"), 0o644); err != nil {
		t.Fatal(err)
	}
	const oom = "head -c 268435456 /dev/zero | tail >/dev/null 2>&1; echo done"
	if out := binData[shellResult](t, srv, http.MethodPost, "/v1/shell/exec", map[string]any{"command": oom}); !strings.Contains(out.Output, "done") {
		t.Fatalf("the server's shell did not outlive the OOM kill: %+v", out)
	}
	if s2 := stats(); s2.Source != source || s2.OOMKills < 1 {
		t.Errorf("stats after an OOM kill in the cgroup = %+v, want oom_kills >= 1", s2)
	}
}

// TestFrozenTimeIsNoIdleness: a command that was busy when frozen is busy
// again once thawed, however long the freeze lasted beyond
// busy_idle_after: the time it could not run is no idleness of its own.
func TestFrozenTimeIsNoIdleness(t *testing.T) {
	t.Parallel()
	srv := testutil.StartSandboxServer(t)
	activity := func() sandboxspec.Activity {
		return binData[sandboxspec.Activity](t, srv, http.MethodGet, sandboxspec.ActivityPath+"?"+sandboxspec.BusyIdleAfterParam+"=3s", nil)
	}
	binData[shellResult](t, srv, http.MethodPost, "/v1/shell/exec", map[string]any{"command": "sleep 300", "async_mode": true})
	if a := activity(); a.Commands != 1 {
		t.Fatalf("activity of a new command = %+v, want it busy", a)
	}
	binData[sandboxspec.Freeze](t, srv, http.MethodPost, sandboxspec.FreezePath, nil)
	time.Sleep(3500 * time.Millisecond)
	if a := activity(); a.Commands != 0 || a.Stalled != 1 {
		t.Errorf("activity of the frozen sandbox = %+v, want its command stalled", a)
	}
	binData[sandboxspec.Freeze](t, srv, http.MethodPost, sandboxspec.ThawPath, nil)
	if a := activity(); a.Commands != 1 {
		t.Errorf("activity right after the thaw = %+v, want the command busy (frozen 3.5 s > busy_idle_after 3s)", a)
	}
}
