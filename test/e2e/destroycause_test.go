package e2e

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/statedb"
)

// Causes of destroyed and ready events (issue 41), each made to happen on a
// real gateway (process backend) over a real redis-server and read back
// from the fleet's event stream.

// fleetEvent waits until the fleet's stream holds an event matching want
// (pre-started sandboxes have no thread stream to watch) and returns it.
func fleetEvent(t *testing.T, f *fleet, within time.Duration, want func(events.Event) bool) events.Event {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	bus, err := events.New(rdb, events.Config{Stream: statusKeys.Events()})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		recent, err := bus.Recent(ctx, 0)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range recent {
			if want(e) {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no such event within %s; the stream holds %+v", within, recent)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// destroyedWith matches the destroyed event of sid with cause.
func destroyedWith(sid, cause string) func(events.Event) bool {
	return func(e events.Event) bool {
		return e.Type == events.Destroyed && e.SandboxID == sid && e.Cause == cause
	}
}

// incarnationOf is the incarnation the fleet's backend runs for sid.
func incarnationOf(t *testing.T, f *fleet, sid string) string {
	t.Helper()
	for _, info := range f.sandboxes() {
		if info.SandboxID == sid {
			return info.Incarnation
		}
	}
	t.Fatalf("sandbox %s does not run", sid)
	return ""
}

// TestFailedHealthDestroysHungSandbox: a sandbox whose command runs for
// several health intervals, with a terminal WebSocket open, is healthy (its
// server answers the probe meanwhile). Once its processes are stopped from
// outside (SIGSTOP, no freeze of Sandgate's), the server answers nothing:
// after health_failures probes it is destroyed with cause failed_health, and
// the thread's next request gets a new sandbox with the data kept.
func TestFailedHealthDestroysHungSandbox(t *testing.T) {
	t.Parallel()
	const interval, failures = 300 * time.Millisecond, 3
	f := newFleet(t, "--health-interval", interval.String(), "--health-timeout", "1s", "--health-failures", strconv.Itoa(failures))
	g := f.start()
	const th = "hung"
	shell(t, g.URL, th, "echo kept > /mnt/user-data/workspace/h.txt")
	sid := sandboxOf(t, g.URL, th).SandboxID
	inc := incarnationOf(t, f, sid)
	s := watchProgress(t, g.URL, th, "")

	// Busy: a WebSocket open and a command running for ten intervals.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.URL, "http")+"/threads/"+th+"/v1/shell/ws", nil)
	if err != nil {
		t.Fatalf("dial terminal: %v (%v)", err, resp)
	}
	defer ws.CloseNow()
	if out := shell(t, g.URL, th, "sleep 3; echo slept"); !strings.Contains(out.Output, "slept") {
		t.Fatalf("long command: %+v", out)
	}
	if d := s.during(500*time.Millisecond, "destroyed"); len(d) > 0 {
		t.Fatalf("a busy sandbox was destroyed: %+v", d)
	}

	// Hung: every process of the sandbox stopped, its server included.
	pid, err := strconv.Atoi(strings.SplitN(inc, "-", 2)[0])
	if err != nil {
		t.Fatalf("incarnation %q: %v", inc, err)
	}
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop sandbox: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGCONT) })
	stoppedAt := time.Now()
	got := s.until(t, "destroyed", 20*time.Second)
	e := got[len(got)-1]
	if e.Cause != "failed_health" || e.SandboxID != sid {
		t.Fatalf("destroyed event %+v, want cause failed_health for %s", e, sid)
	}
	t.Logf("destroyed %s after the server stopped (%d probes of %s, timeout 1s)", time.Since(stoppedAt).Round(100*time.Millisecond), failures, interval)
	if out := shell(t, g.URL, th, "cat /mnt/user-data/workspace/h.txt"); strings.TrimSpace(out.Output) != "kept" {
		t.Fatalf("next request: %+v, want the thread's data", out)
	}
	if now := incarnationOf(t, f, sid); now == inc {
		t.Fatalf("the hung incarnation %s still serves", inc)
	}
}

// TestFrozenSandboxIsNotJudged: a frozen sandbox answers no probe, by
// design. Frozen on one replica while the other still holds its route, it
// outlives many health intervals, and its next request thaws it.
func TestFrozenSandboxIsNotJudged(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--health-interval", "200ms", "--health-timeout", "300ms", "--health-failures", "2",
		"--cache-ttl", "500ms", "--touch-interval", "200ms")
	a, b := f.start(), f.start()
	const th = "frozen-health"
	shell(t, a.URL, th, "echo hi > /tmp/x")
	shell(t, b.URL, th, "true") // b caches the route too
	sid := sandboxOf(t, a.URL, th).SandboxID
	inc := incarnationOf(t, f, sid)
	s := watchProgress(t, a.URL, th, "")
	time.Sleep(600 * time.Millisecond) // b's touch of its request is flushed: a later one would refuse the freeze
	if code, body, _ := call(t, "POST", a.URL+"/threads/"+th+"/sandbox/freeze", nil); code != 200 {
		t.Fatalf("freeze: %d %s", code, body)
	}
	if d := s.during(3*time.Second, "destroyed"); len(d) > 0 {
		t.Fatalf("a frozen sandbox was destroyed: %+v", d)
	}
	if out := shell(t, b.URL, th, "cat /tmp/x"); strings.TrimSpace(out.Output) != "hi" {
		t.Fatalf("after thaw: %+v", out)
	}
	if now := incarnationOf(t, f, sid); now != inc {
		t.Fatalf("incarnation %s after the freeze, want %s", now, inc)
	}
}

// TestQuotaEvictionEvent: a user at max_sandboxes_per_user with a warm
// sandbox creates another: the warm one is destroyed with cause quota (not
// evicted, which is the fleet's room).
func TestQuotaEvictionEvent(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "alice="+sha("alice-key"), "--max-sandboxes-per-user", "1", "--max-sandboxes", "0")
	g := f.start()
	first, _ := putThread(t, g.URL, "alice-key", "qa")
	if code, body, _ := call(t, "DELETE", g.URL+"/threads/qa/sandbox", nil, "Authorization", "Bearer alice-key"); code != 204 {
		t.Fatalf("release: %d %s", code, body)
	}
	putThread(t, g.URL, "alice-key", "qb")
	e := fleetEvent(t, f, 10*time.Second, func(e events.Event) bool { return e.Type == events.Destroyed && e.SandboxID == first })
	if e.Cause != "quota" || e.User != "alice" || e.Thread != "qa" {
		t.Fatalf("destroyed event %+v, want cause quota for alice's qa", e)
	}
}

// TestProvisionerDeleteEvent: DeerFlow's provisioner API DELETE destroys
// with cause provisioner_api.
func TestProvisionerDeleteEvent(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	key := []string{"X-API-Key", "deerflow-key"}
	payload := map[string]any{"sandbox_id": "7c1d2e3f", "thread_id": "prov-ev", "user_id": "default", "required_mount_contract_version": 2}
	if code, body, _ := call(t, "POST", g.URL+"/api/sandboxes", payload, key...); code != 200 {
		t.Fatalf("create: %d %s", code, body)
	}
	sid := identity.SandboxID("default", "prov-ev")
	if code, body, _ := call(t, "DELETE", g.URL+"/api/sandboxes/7c1d2e3f", nil, key...); code != 200 && code != 204 {
		t.Fatalf("delete: %d %s", code, body)
	}
	fleetEvent(t, f, 10*time.Second, destroyedWith(sid, "provisioner_api"))
}

// TestPrewarmTrimEvent: a replica keeping a smaller pre-started pool than
// the one it finds trims the surplus, with cause prewarm_trim.
func TestPrewarmTrimEvent(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--max-sandboxes", "0")
	g := f.start("--prewarm", "2")
	before := waitPrewarmed(t, f, 2)
	// Both recorded before the stop: one the backend lists may still be
	// in its create, which the stop cancels, leaving it for adoption (no
	// trim then: the new replica counts one).
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	store := statedb.NewStore(rdb, "")
	if !eventually(20*time.Second, func() bool {
		recs, err := store.PrewarmRecords(context.Background())
		return err == nil && len(recs) == 2
	}) {
		t.Fatal("the 2 pre-started sandboxes were not both recorded within 20s")
	}
	g.stop()
	f.start("--prewarm", "1")
	e := fleetEvent(t, f, 20*time.Second, func(e events.Event) bool {
		return e.Type == events.Destroyed && e.Cause == "prewarm_trim"
	})
	if _, ok := before[e.Incarnation]; !ok {
		t.Fatalf("trimmed %+v, not one of the pre-started %v", e, before)
	}
	waitPrewarmed(t, f, 1)
}

// TestInterruptedDestroyEvent: a replica that claimed a sandbox for a
// destroy and died before destroying it (the claim is made here, as that
// replica's step) leaves the record in state destroying; the thread's next
// request finishes the destroy (cause interrupted) and gets a new sandbox.
func TestInterruptedDestroyEvent(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--cache-ttl", "300ms")
	g := f.start()
	const th = "interrupted"
	shell(t, g.URL, th, "true")
	sid := sandboxOf(t, g.URL, th).SandboxID
	inc := incarnationOf(t, f, sid)
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, ok, err := statedb.NewStore(rdb, "").Claim(ctx, sid, inc); !ok || err != nil {
		t.Fatalf("claim as the dead replica: %v %v", ok, err)
	}
	s := watchProgress(t, g.URL, th, "")
	// The route cached before the claim is trusted for cache_ttl.
	time.Sleep(500 * time.Millisecond)
	shell(t, g.URL, th, "true")
	got := s.until(t, "destroyed", 10*time.Second)
	if e := got[len(got)-1]; e.Cause != "interrupted" || e.SandboxID != sid {
		t.Fatalf("destroyed event %+v, want cause interrupted", e)
	}
	if now := incarnationOf(t, f, sid); now == inc {
		t.Fatalf("the claimed incarnation %s still serves", inc)
	}
}

// TestAdoptedReadyEvent: a replica restarts on a Redis that lost its state
// (a restart without persistence); the sandbox its predecessor made still
// runs, and the thread's next request adopts it: a ready event with cause
// adopted, the same incarnation.
func TestAdoptedReadyEvent(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	const th = "adopt-ev"
	shell(t, g.URL, th, "true")
	sid := sandboxOf(t, g.URL, th).SandboxID
	inc := incarnationOf(t, f, sid)
	g.kill()
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	g = f.start()
	s := watchProgress(t, g.URL, th, "")
	shell(t, g.URL, th, "true")
	got := s.until(t, "ready", 10*time.Second)
	if e := got[len(got)-1]; e.Cause != "adopted" || e.SandboxID != sid {
		t.Fatalf("ready event %+v, want cause adopted", e)
	}
	if now := incarnationOf(t, f, sid); now != inc {
		t.Fatalf("incarnation %s after the restart, want the adopted %s", now, inc)
	}
}
