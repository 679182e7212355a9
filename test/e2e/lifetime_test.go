package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Issue 33 finding 7: a sandbox whose only command does nothing (it stopped
// itself, or waits on a child that did) was never frozen or reaped, and
// nothing bounded how long a busy one lived. These run a real gateway
// (process backend) and check the sandbox is really gone: the pool's
// "sandbox destroyed" line with its reason, and the backend's list without
// it (a 404 of GET /threads/x/sandbox would only mean no record).

// destroyedFor is the reason of the pool's destroy line for sid, "" = none.
func destroyedFor(t *testing.T, g *gateway, sid string) string {
	t.Helper()
	for _, e := range logEntries(t, g) {
		if e["msg"] == "sandbox destroyed" && e["sandbox_id"] == sid && e["reason"] != nil {
			r, _ := e["reason"].(string)
			return r
		}
	}
	return ""
}

// stillRuns: the fleet's backend still runs sid.
func stillRuns(f *fleet, sid string) bool {
	for _, info := range f.sandboxes() {
		if info.SandboxID == sid {
			return true
		}
	}
	return false
}

// startAsync runs command async in thread's sandbox and returns its id.
func startAsync(t *testing.T, g *gateway, thread, command string) string {
	t.Helper()
	code, body, _ := call(t, "POST", g.URL+"/threads/"+thread+"/v1/shell/exec",
		map[string]any{"command": command, "async_mode": true})
	if code != 200 {
		t.Fatalf("async exec in %s: %d %s", thread, code, body)
	}
	return sandboxOf(t, g.URL, thread).SandboxID
}

// awaitDestroyed waits until sid is destroyed for reason and gone from the
// backend.
func awaitDestroyed(t *testing.T, f *fleet, g *gateway, sid, reason string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := destroyedFor(t, g, sid)
		if got != "" && got != reason {
			t.Fatalf("sandbox %s destroyed for %q, want %q", sid, got, reason)
		}
		if got == reason && !stillRuns(f, sid) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s not destroyed (%s) within %s: destroy line %q, backend runs it: %v", sid, reason, within, got, stillRuns(f, sid))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// A shell that stopped itself (its whole process group stopped) keeps
// nothing alive: reaped at idle_timeout, with busy_idle_after at its 30m
// default.
func TestSelfStoppedCommandIsReaped(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--idle-timeout", "3s", "--reap-interval", "500ms")
	g := f.start()
	sid := startAsync(t, g, "stopped", "kill -STOP $$")
	awaitDestroyed(t, f, g, sid, "idle", 20*time.Second)
}

// `sh -c 'kill -STOP $$'`: the child stops, the command's shell waits for
// it, sleeping; no CPU, no output for busy_idle_after, so it stops counting
// as busy and the sandbox is reaped. A command that writes output on the
// same gateway is kept past many idle timeouts.
func TestStalledCommandIsReapedBusyOneIsNot(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--idle-timeout", "3s", "--reap-interval", "500ms", "--busy-idle-after", "2s")
	g := f.start()
	stalled := startAsync(t, g, "stalled", "sh -c 'kill -STOP $$'")
	busy := startAsync(t, g, "ticking", "while :; do echo tick; sleep 0.5; done")
	awaitDestroyed(t, f, g, stalled, "idle", 30*time.Second)
	time.Sleep(6 * time.Second) // two more idle timeouts with no request
	if r := destroyedFor(t, g, busy); r != "" || !stillRuns(f, busy) {
		t.Fatalf("a sandbox whose command writes output was destroyed (%q) or is gone", r)
	}
}

// max_lifetime destroys a sandbox however busy it is.
func TestMaxLifetimeDestroysBusySandbox(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--idle-timeout", "1m", "--reap-interval", "500ms", "--max-lifetime", "5s")
	g := f.start()
	sid := startAsync(t, g, "forever", "while :; do echo tick; sleep 0.2; done")
	awaitDestroyed(t, f, g, sid, "max_lifetime", 30*time.Second)
}

// With authentication and no per-user setting, one user holds at most 8
// sandboxes (the 9th is 429 user_quota), and the start-up log says so.
func TestMultiUserLimitsByDefault(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "alice="+sha("alice-key"))
	g := f.start()
	var limits map[string]any
	for _, e := range logEntries(t, g) {
		if e["msg"] == "sandbox limits" {
			limits = e
		}
	}
	if limits["multi_user"] != true || limits["max_sandboxes_per_user"] != "8" || limits["max_creates_per_user"] != "4" ||
		limits["max_lifetime"] != "24h0m0s" || limits["busy_idle_after"] != "30m0s" {
		t.Fatalf("start-up limits line: %v", limits)
	}
	for i := range 8 {
		if a := putSandbox(g.URL, "alice-key", fmt.Sprintf("mu%d", i)); a.err != nil || a.code != 200 {
			t.Fatalf("sandbox %d: %d %s %v", i, a.code, a.body, a.err)
		}
	}
	a := putSandbox(g.URL, "alice-key", "mu8")
	if a.code != 429 || !strings.Contains(a.body, "user_quota") || !strings.Contains(a.body, "max_sandboxes_per_user") {
		t.Fatalf("9th sandbox of one user: %d %s", a.code, a.body)
	}
}
