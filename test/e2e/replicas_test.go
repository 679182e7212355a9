package e2e

import (
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/identity"
)

// 300 concurrent first requests for 30 new threads, spread over three
// replicas on one Redis: exactly one sandbox per thread, no error.
func TestReplicasCreateExactlyOneSandboxPerThread(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--max-sandboxes", "0")
	firstRequestBurst(t, f, []*gateway{f.start(), f.start(), f.start()}, "burst", 30, 300, 3*time.Minute)
}

// firstRequestBurst sends requests concurrent first requests for threads
// new threads ({prefix}-NN), round robin over replicas, and checks that
// every one answered and each thread got exactly one sandbox.
func firstRequestBurst(t *testing.T, f *fleet, replicas []*gateway, prefix string, threads, requests int, wait time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, requests)
	start := make(chan struct{})
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := replicas[i%len(replicas)]
			thread := fmt.Sprintf("%s-%02d", prefix, (i/len(replicas))%threads)
			<-start
			// Errors travel back on errs: t.Fatal is for the test's goroutine.
			r := <-execAsync(g.URL, thread, "echo ok")
			if r.err != nil || r.code != 200 || !strings.Contains(string(r.body), `"output":"ok\n"`) {
				errs <- fmt.Sprintf("%s via %s: %d %v %s", thread, g.URL, r.code, r.err, r.body)
			}
		}()
	}
	close(start)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(wait):
		t.Fatalf("%d first requests for %d threads not all answered in %s", requests, threads, wait)
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	live := f.sandboxes()
	ids := map[string]int{}
	for _, s := range live {
		ids[s.SandboxID]++
	}
	if len(live) != threads || len(ids) != threads {
		t.Fatalf("%d sandbox processes, %d distinct ids, want %d of each", len(live), len(ids), threads)
	}
	for i := range threads {
		if sid := identity.SandboxID("default", fmt.Sprintf("%s-%02d", prefix, i)); ids[sid] != 1 {
			t.Errorf("thread %s-%02d has %d sandboxes", prefix, i, ids[sid])
		}
	}
}

// A replica killed while it provisions leaves no duplicate and no orphan:
// once its lock expires, another replica adopts the sandbox it started.
func TestReplicaKilledMidCreateLeavesNoDuplicateOrOrphan(t *testing.T) {
	t.Parallel()
	killMidCreate(t, newFleet(t, "--lock-ttl", "1s", "--process-isolation", "none"), "victim") // slowSandbox is a script: see there
}

// killMidCreate kills (SIGKILL) one of two replicas of f while it creates
// thread's sandbox, then checks that the other serves it from exactly the
// one sandbox that was started, and that its record names that sandbox.
func killMidCreate(t *testing.T, f *fleet, thread string) {
	t.Helper()
	// A sandbox binary that takes a while to start, so the kill lands mid-create.
	slow, pids := slowSandbox(t, f, "1")
	a := f.start("--process-binary", slow)
	b := f.start("--process-binary", slow)

	res := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("PUT", a.URL+"/threads/"+thread+"/sandbox", nil)
		resp, err := clientFor(req.URL.String()).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		res <- err
	}()
	// Kill replica a once its create is under way: the child runs and a
	// recorded it, and it cannot answer for another second.
	waitFor(t, func() bool {
		started, _ := os.ReadFile(pids)
		return len(started) > 0 && len(f.sandboxes()) > 0
	})
	a.kill()
	select { // the client sees a broken connection; what matters is the fleet state
	case <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("the request to the killed replica did not end in 30s")
	}

	d := shell(t, b.URL, thread, "echo alive")
	if strings.TrimSpace(d.Output) != "alive" {
		t.Fatalf("via replica b: %+v", d)
	}
	// Every sandbox process any create started has either exited or become
	// a sandbox (exec'd the binary): no create is still on its way.
	waitFor(t, func() bool {
		started, _ := os.ReadFile(pids)
		for _, s := range strings.Fields(string(started)) {
			pid, _ := strconv.Atoi(s)
			if running(pid) && !strings.HasPrefix(cmdline(pid), f.bin+" ") {
				return false
			}
		}
		return true
	})
	live := f.sandboxes()
	if len(live) != 1 {
		t.Fatalf("%d sandboxes for one thread after a replica died mid-create: %+v", len(live), live)
	}
	v := sandboxOf(t, b.URL, thread)
	if v.SandboxID != live[0].SandboxID || v.State != "active" {
		t.Fatalf("record %+v does not match the live sandbox %+v (orphan)", v, live[0])
	}
	ids := []string{}
	for _, s := range live {
		ids = append(ids, s.Incarnation)
	}
	sort.Strings(ids)
	t.Logf("surviving incarnation %v; replica b log:\n%s", ids, tail(b.logs.String(), 8))
}
