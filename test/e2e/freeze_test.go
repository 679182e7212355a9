package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// freezeArgs make a sandbox freeze 2 s after its last use: above cache_ttl
// + touch_interval, as the gateway requires.
var freezeArgs = []string{"--freeze-after", "2s", "--cache-ttl", "500ms", "--touch-interval", "200ms"}

// frozenView is what GET /threads/{t}/sandbox says of a freeze.
func frozenOf(t *testing.T, base, thread string) bool {
	t.Helper()
	code, body, _ := call(t, "GET", base+"/threads/"+thread+"/sandbox", nil)
	if code != 200 {
		t.Fatalf("GET sandbox of %s: %d %s", thread, code, body)
	}
	var v struct {
		Frozen bool `json:"frozen"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	return v.Frozen
}

func waitFrozen(t *testing.T, base, thread string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !frozenOf(t, base, thread) {
		if time.Now().After(deadline) {
			t.Fatalf("sandbox of %s not frozen within %s", thread, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// hostPids are the host pids of processes whose command line holds marker.
func hostPids(t *testing.T, marker string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procStat is a process's state letter and its CPU time in clock ticks.
func procStat(t *testing.T, pid int) (byte, uint64) {
	t.Helper()
	state, ticks, ok := procStatOf(pid)
	if !ok {
		t.Fatalf("no stat of process %d", pid)
	}
	return state, ticks
}

// procStatOf is procStat of a process that may be gone (ok false).
func procStatOf(pid int) (state byte, ticks uint64, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseUint(f[11], 10, 64)
	stime, _ := strconv.ParseUint(f[12], 10, 64)
	return f[0][0], utime + stime, true
}

// stopped says whether pid cannot run: SIGSTOPped (state T), or in a
// cgroup the freezer holds (v2: cgroup.events "frozen 1"; v1: the freezer
// hierarchy's freezer.state FROZEN).
func stopped(t *testing.T, pid int) bool {
	t.Helper()
	if st, _ := procStat(t, pid); st == 'T' {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[2] == "/" {
			continue
		}
		switch parts[1] {
		case "":
			ev, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", parts[2], "cgroup.events"))
			if err == nil && strings.Contains(string(ev), "frozen 1") {
				return true
			}
		case "freezer":
			st, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/freezer", parts[2], "freezer.state"))
			if err == nil && strings.TrimSpace(string(st)) == "FROZEN" {
				return true
			}
		}
	}
	return false
}

// An idle sandbox is frozen after freeze_after: a busy loop it runs in the
// background stops (its process stopped, its CPU time flat over 5 s); the
// next request, through the other replica, thaws it and finds its memory
// as it was; the loop runs again.
func TestIdleSandboxFreezesAndThawsOnAnotherReplica(t *testing.T) {
	t.Parallel()
	f := newFleet(t, freezeArgs...)
	g1, g2 := f.start(), f.start()
	marker := "burner-" + randomHex(6)
	out := shell(t, g1.URL, "frz", "echo kept > /tmp/state; sh -c 'while :; do :; done' "+marker+" >/dev/null 2>&1 & echo started")
	if !strings.Contains(out.Output, "started") {
		t.Fatalf("start burner: %+v", out)
	}
	pids := hostPids(t, marker)
	if len(pids) != 1 {
		t.Fatalf("burner %s: host pids %v, want one", marker, pids)
	}
	burner := pids[0]
	waitFrozen(t, g2.URL, "frz", 15*time.Second)
	if !stopped(t, burner) {
		st, _ := procStat(t, burner)
		t.Fatalf("sandbox marked frozen but its busy loop runs (state %c)", st)
	}
	_, before := procStat(t, burner)
	time.Sleep(5 * time.Second)
	if _, after := procStat(t, burner); after != before {
		t.Fatalf("frozen busy loop used CPU: %d -> %d ticks in 5 s", before, after)
	}
	if !frozenOf(t, g1.URL, "frz") {
		t.Fatal("sandbox thawed without a request")
	}

	got := shell(t, g2.URL, "frz", "cat /tmp/state")
	if strings.TrimSpace(got.Output) != "kept" {
		t.Fatalf("after thaw: %q, want the state written before the freeze", got.Output)
	}
	if frozenOf(t, g1.URL, "frz") {
		t.Fatal("sandbox still marked frozen after a request thawed it")
	}
	_, thawed := procStat(t, burner)
	time.Sleep(time.Second)
	if _, later := procStat(t, burner); later == thawed || stopped(t, burner) {
		t.Fatalf("busy loop does not run after the thaw (%d -> %d ticks)", thawed, later)
	}
	if !strings.Contains(g1.logs.String()+g2.logs.String(), `"sandbox frozen"`) {
		t.Fatal("no replica logged the freeze")
	}
	shell(t, g1.URL, "frz", "pkill -f "+marker+" || true")
}

// A sandbox that runs an async command, or holds an open WebSocket
// terminal, is never frozen however long it has been since a request
// began; once the command ends it is.
func TestBusySandboxIsNotFrozen(t *testing.T) {
	t.Parallel()
	f := newFleet(t, freezeArgs...)
	g := f.start()
	// The command runs until the test ends it: a command with an end of its
	// own would race the polling below, which a loaded machine slows down.
	code, body, _ := call(t, "POST", g.URL+"/threads/cmd/v1/shell/exec",
		map[string]any{"command": "sleep 600", "async_mode": true})
	var exec struct {
		Data struct {
			SessionID string `json:"session_id"`
			Status    string `json:"status"`
		} `json:"data"`
	}
	if code != 200 || json.Unmarshal(body, &exec) != nil || exec.Data.Status != "running" {
		t.Fatalf("async exec: %d %s", code, body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.URL, "http")+"/threads/term/v1/shell/ws", nil)
	if err != nil {
		t.Fatalf("dial terminal: %v (%v)", err, resp)
	}
	defer ws.CloseNow()

	for range 25 { // 5 s: freeze_after (2 s) passes twice over
		if frozenOf(t, g.URL, "cmd") {
			t.Fatal("sandbox frozen while its async command runs")
		}
		if frozenOf(t, g.URL, "term") {
			t.Fatal("sandbox frozen while a WebSocket terminal is open to it")
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The command ended, the sandbox freezes once idle for 2 s.
	if code, body, _ := call(t, "POST", g.URL+"/threads/cmd/v1/shell/kill", map[string]any{"id": exec.Data.SessionID}); code != 200 {
		t.Fatalf("kill the command: %d %s", code, body)
	}
	waitFrozen(t, g.URL, "cmd", 20*time.Second)
	if frozenOf(t, g.URL, "term") {
		t.Fatal("sandbox frozen while a WebSocket terminal is open to it")
	}
}

// Freeze on demand waits out the replicas' cached routes, then stops the
// sandbox; a use meanwhile is 409 sandbox_busy and leaves it running.
func TestFreezeOnDemand(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--cache-ttl", "500ms", "--touch-interval", "200ms")
	g := f.start()
	shell(t, g.URL, "od", "echo hi > /tmp/x")
	code, body, _ := call(t, "POST", g.URL+"/threads/od/sandbox/freeze", nil)
	if code != 200 || !frozenOf(t, g.URL, "od") {
		t.Fatalf("freeze: %d %s", code, body)
	}
	if out := shell(t, g.URL, "od", "cat /tmp/x"); strings.TrimSpace(out.Output) != "hi" {
		t.Fatalf("after thaw: %q", out.Output)
	}
	// Busy: a command runs through the wait.
	code, body, _ = call(t, "POST", g.URL+"/threads/od/v1/shell/exec", map[string]any{"command": "sleep 5", "async_mode": true})
	if code != 200 {
		t.Fatalf("async exec: %d %s", code, body)
	}
	code, body, _ = call(t, "POST", g.URL+"/threads/od/sandbox/freeze", nil)
	if code != 409 || errorCode(t, body) != "sandbox_busy" || frozenOf(t, g.URL, "od") {
		t.Fatalf("freeze of a busy sandbox: %d %s", code, body)
	}
	if code, _, _ := call(t, "POST", g.URL+"/threads/none/sandbox/freeze", nil); code != 404 {
		t.Fatalf("freeze of a thread without sandbox: %d, want 404", code)
	}
}

// Docker: an idle container is paused by the engine (docker inspect says
// Paused) and the next request, through another replica, unpauses it.
func TestIdleContainerFreezesAndThaws(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	f := d.fleet(freezeArgs...)
	g1, g2 := f.start(), f.start()
	shell(t, g1.URL, "dfrz", "echo kept > /tmp/state")
	waitFrozen(t, g2.URL, "dfrz", 20*time.Second)
	if c := d.containerOf(g1.URL, "dfrz"); c.State == nil || !c.State.Paused {
		t.Fatalf("container of a frozen sandbox not paused: %+v", c.State)
	}
	if out := shell(t, g2.URL, "dfrz", "cat /tmp/state"); strings.TrimSpace(out.Output) != "kept" {
		t.Fatalf("after thaw: %q", out.Output)
	}
	if c := d.containerOf(g1.URL, "dfrz"); c.State == nil || c.State.Paused || !c.State.Running {
		t.Fatalf("container still paused after a request thawed it: %+v", c.State)
	}
}

// An async command outlives its request: with nothing in flight and past
// idle_timeout, its sandbox is asked before it is reaped and spared while
// the command runs; once it ends the sandbox expires as any other.
func TestAsyncCommandOutlivesIdleTimeout(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--idle-timeout", "3s", "--reap-interval", "500ms")
	g := f.start()
	code, body, _ := call(t, "POST", g.URL+"/threads/long/v1/shell/exec",
		map[string]any{"command": "sleep 7; echo done > /mnt/user-data/workspace/finished", "async_mode": true})
	if code != 200 {
		t.Fatalf("async exec: %d %s", code, body)
	}
	sid := sandboxOf(t, g.URL, "long").SandboxID
	time.Sleep(6 * time.Second) // twice idle_timeout, no request
	if v := sandboxOf(t, g.URL, "long"); v.SandboxID != sid {
		t.Fatalf("sandbox replaced while its command ran: %s -> %s", sid, v.SandboxID)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _, _ := call(t, "GET", g.URL+"/threads/long/sandbox", nil)
		if code == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sandbox not reaped after its command ended")
		}
		time.Sleep(300 * time.Millisecond)
	}
	if b, err := os.ReadFile(filepath.Join(f.userData("long"), "workspace", "finished")); err != nil || strings.TrimSpace(string(b)) != "done" {
		t.Fatalf("the command did not finish before the reap: %q %v", b, err)
	}
}
