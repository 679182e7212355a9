package e2e

import (
	"strings"
	"testing"
	"time"
)

// Events whose cause comes from outside the pool (issue 41): the kernel's
// OOM killer, read from the sandbox's memory cgroup (process) or the
// engine's events (docker), and the egress proxy's refusals, rate-limited
// per sandbox.

// oomCommand holds 256 MiB in tail (a line it has not seen the end of), in
// a sandbox limited to 64 MiB: the OOM killer ends tail, the sandbox lives.
const oomCommand = "head -c 268435456 /dev/zero | tail >/dev/null 2>&1; echo done"

// TestOOMKilledEventProcess: an allocation past an isolated process
// sandbox's memory limit is read from its cgroup (cgroup v1's
// memory.oom_control here) and published once, with cause oom and the
// sandbox's identity, to the thread's event stream.
func TestOOMKilledEventProcess(t *testing.T) {
	t.Parallel()
	g := newFleet(t, "--process-memory", "64m").start()
	oomKilledShows(t, g.URL, "oomp", 3*time.Second)
}

// TestOOMKilledEventDocker: the same in a docker sandbox, whose OOM kill
// comes from the engine's oom event (the container keeps running).
func TestOOMKilledEventDocker(t *testing.T) {
	t.Parallel()
	d := newDockerEnv(t)
	g := d.fleet("--docker-memory", "64m").start()
	oomKilledShows(t, g.URL, "oomd", 3*time.Second)
}

// TestOOMKilledEventKubernetes: the same in a Pod on the real node, whose
// container runc gives a memory cgroup with the Pod's limit: Sandgate's
// server in the Pod reads the kill from that cgroup (its own, seen from
// inside) and the gateway's sampler, asking it every 5 s, publishes it.
func TestOOMKilledEventKubernetes(t *testing.T) {
	t.Parallel()
	c := newKubeCluster(t)
	g := newFleet(t, append(c.flags(t), "--kubernetes-memory-request", "64Mi", "--kubernetes-memory-limit", "64Mi")...).start()
	// The limit is the container's own cgroup's, as the server sees it.
	const limit = "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
	if out := strings.TrimSpace(shell(t, g.URL, "oomk", limit).Output); out != "67108864" {
		t.Fatalf("the Pod's memory cgroup limit is %q, want 64Mi", out)
	}
	// Quiet for two of the sampler's 5 s rounds after the event.
	oomKilledShows(t, g.URL, "oomk", 11*time.Second)
}

// oomKilledShows runs oomCommand in thread's sandbox and expects one
// oom_killed event, and no other during quiet after it.
func oomKilledShows(t *testing.T, base, thread string, quiet time.Duration) {
	t.Helper()
	shell(t, base, thread, "true")
	sid := sandboxOf(t, base, thread).SandboxID
	s := watchProgress(t, base, thread, "")
	if out := shell(t, base, thread, oomCommand); !strings.Contains(out.Output, "done") {
		t.Fatalf("the sandbox did not outlive its OOM kill: %+v", out)
	}
	got := s.until(t, "oom_killed", 30*time.Second)
	e := got[len(got)-1]
	if e.Cause != "oom" || e.SandboxID != sid || e.Thread != thread || e.Count < 1 {
		t.Fatalf("oom_killed event %+v, want cause oom for %s of %s", e, sid, thread)
	}
	// One kill, one event: another replica's or another pass's sample of
	// the same count publishes nothing more.
	if more := s.during(quiet, "oom_killed"); len(more) > 0 {
		t.Errorf("a second oom_killed event for one kill: %+v", more)
	}
}

// TestEgressDeniedEvent: a loop of connects to an allow-listed name that
// resolves to the metadata address is refused by the proxy before it dials
// (the origin sees nothing); the thread's stream gets one egress_denied
// event with the reason and host for the whole loop, and after the window
// the next refusal's event counts the ones held back.
func TestEgressDeniedEvent(t *testing.T) {
	t.Parallel()
	w := newEgressWorld(t)
	const window = 8 * time.Second
	g := newFleet(t, append(w.flags("proxy"), "--egress-denied-every", window.String())...).start()
	const th = "egress-ev"
	shell(t, g.URL, th, "true")
	s := watchProgress(t, g.URL, th, "")
	const loop = 20
	// One curl asking loop times (a process per connect is slow to start
	// in a jail on a busy machine; the loop must fit the window).
	cmd := "curl -s -m 20 " + strings.Repeat(w.url("meta.internal")+" ", loop) + ">/dev/null; echo looped"
	if out := shell(t, g.URL, th, cmd); !strings.Contains(out.Output, "looped") {
		t.Fatalf("loop: %+v", out)
	}
	first := s.until(t, "egress_denied", 10*time.Second)
	windowEnds := time.Now().Add(window + 300*time.Millisecond) // the event came after its refusal
	e := first[len(first)-1]
	if e.Cause != "private_address" || e.Host != "meta.internal" || e.Count != 1 || e.Thread != th {
		t.Fatalf("first egress_denied event %+v, want private_address for meta.internal, count 1", e)
	}
	// The window holds the rest of the loop back.
	if more := s.during(time.Until(windowEnds), "egress_denied"); len(more) > 0 {
		t.Fatalf("egress_denied events within the window: %+v", more)
	}
	run(t, g, th, "curl -s -m 5 -o /dev/null "+w.url("other.internal"))
	next := s.until(t, "egress_denied", 10*time.Second)
	e = next[len(next)-1]
	if e.Cause != "not_allowed" || e.Host != "other.internal" || e.Count != loop {
		t.Fatalf("egress_denied after the window %+v, want not_allowed for other.internal counting %d (itself and %d held back)", e, loop, loop-1)
	}
	if n := w.hits.Load(); n != 0 {
		t.Fatalf("the origin served %d requests: a refused connect left the proxy", n)
	}
}

// during collects the events of type typ the stream sends for d.
func (s *progressStream) during(d time.Duration, typ string) []progressEvent {
	var got []progressEvent
	deadline := time.After(d)
	for {
		select {
		case e, ok := <-s.events:
			if !ok {
				return got
			}
			if e.Type == typ {
				got = append(got, e)
			}
		case <-deadline:
			return got
		}
	}
}
