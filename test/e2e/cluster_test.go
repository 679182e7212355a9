package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/api"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/testutil"
)

// The tests here run the gateway fleet on a real three-master Redis
// Cluster (issue 22): the --redis-url is redis+cluster://, and nothing
// else changes.

// Concurrent first requests from three replicas for 12 new threads: exactly
// one sandbox per thread, no error.
func TestClusterReplicasCreateExactlyOneSandboxPerThread(t *testing.T) {
	t.Parallel()
	c := testutil.StartRedisCluster(t, 3)
	f := newFleetOn(t, c.URL(), "--max-sandboxes", "0")
	replicas := []*gateway{f.start(), f.start(), f.start()}
	// Each thread gets 6 requests, two through each replica.
	const threads = 12
	since := "?until=ready&since=" + time.Now().Add(-time.Second).UTC().Format(time.RFC3339)
	firstRequestBurst(t, f, replicas, "cburst", threads, 72, 2*time.Minute)
	for i := range threads {
		thread := fmt.Sprintf("cburst-%02d", i)
		// The fleet's event stream (in the {fleet} slot) has the one create,
		// read back through any replica.
		got := watchProgress(t, replicas[(i+1)%len(replicas)].URL, thread, since).rest(t, 10*time.Second)
		if typesOfProgress(got) != "starting,ready" || got[1].Cause != "cold" {
			t.Errorf("%s's events %+v, want one starting and a cold ready", thread, got)
		}
		// Every replica resolves the thread to that one sandbox.
		for _, g := range replicas {
			if v := sandboxOf(t, g.URL, thread); v.SandboxID != identity.SandboxID("default", thread) || v.State != "active" {
				t.Errorf("%s via %s: %+v", thread, g.URL, v)
			}
		}
	}
}

// A replica killed (SIGKILL) while it provisions leaves no duplicate and no
// orphan on the Cluster: once its lock expires, another replica adopts the
// sandbox it started.
func TestClusterReplicaKilledMidCreateLeavesNoDuplicateOrOrphan(t *testing.T) {
	t.Parallel()
	c := testutil.StartRedisCluster(t, 3)
	killMidCreate(t, newFleetOn(t, c.URL(), "--lock-ttl", "1s", "--process-isolation", "none"), "cvictim") // slowSandbox is a script: see there
}

// Three replicas reap six idle sandboxes on the Cluster, each exactly once,
// and leave alone a busy one whose command runs past the idle timeout.
//
// "Exactly once" is counted three independent ways over all replicas: the
// pool's "sandbox destroyed" log line (reason idle, written after the
// replica's claim and its backend destroy succeeded), the process
// backend's own "sandbox destroyed" line (one per backend Destroy that
// stopped an incarnation), and the sum of sandgate_sandbox_destroys_total
// {reason="idle"} and of sandgate_reaper_claims_total. Two replicas that
// both claimed a sandbox would each destroy it, log it and count it: a
// broken claim shows as a 2, a lost destroy as a 0.
func TestClusterReapsEachIdleSandboxExactlyOnce(t *testing.T) {
	t.Parallel()
	c := testutil.StartRedisCluster(t, 3)
	f := newFleetOn(t, c.URL(), "--max-sandboxes", "0", "--idle-timeout", "3s", "--reap-interval", "100ms")
	replicas := []*gateway{f.start(), f.start(), f.start()}
	const idle = 6
	var idleThreads []string
	var creates []<-chan execResult
	for i := range idle {
		th := fmt.Sprintf("creap-%d", i)
		idleThreads = append(idleThreads, th)
		creates = append(creates, execAsync(replicas[i%len(replicas)].URL, th, "true"))
	}
	for _, r := range creates {
		await(t, r, time.Minute)
	}
	busy := replicas[0]
	shell(t, busy.URL, "creap-busy", "true")
	ws := filepath.Join(f.dataDir, "users", "default", "threads", "creap-busy", "user-data", "workspace")
	res := execAsync(busy.URL, "creap-busy", "touch /mnt/user-data/workspace/started; "+
		"while [ ! -f /mnt/user-data/workspace/go ]; do sleep 0.05; done; echo survived")
	waitFor(t, func() bool { _, err := os.Stat(filepath.Join(ws, "started")); return err == nil })
	started := time.Now()
	busyID := identity.SandboxID("default", "creap-busy")
	idleIDs := map[string]string{}
	for _, th := range idleThreads {
		idleIDs[identity.SandboxID("default", th)] = th
	}
	waitFor(t, func() bool {
		for _, s := range f.sandboxes() {
			if _, ok := idleIDs[s.SandboxID]; ok {
				return false
			}
		}
		return true
	})
	// Not a synchronisation: the busy command must run for longer than the
	// idle timeout (3s) plus a few reap intervals while three reapers run.
	time.Sleep(time.Until(started.Add(4 * time.Second)))
	alive := false
	for _, s := range f.sandboxes() {
		alive = alive || s.SandboxID == busyID
	}
	if !alive {
		t.Fatal("the busy sandbox was reaped while its command ran")
	}
	if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if d := await(t, res, 30*time.Second); strings.TrimSpace(d.Output) != "survived" {
		t.Fatalf("long command: %+v", d)
	}

	// The destroys, per sandbox, over every replica's log.
	poolDestroys := map[string]int{}    // sid -> pool lines with reason idle
	backendDestroys := map[string]int{} // sid -> process backend lines
	byReplica := map[string]int{}
	for _, g := range replicas {
		for _, e := range logEntries(t, g) {
			sid, _ := e["sandbox_id"].(string)
			switch {
			case e["msg"] == "sandbox destroyed" && e["reason"] != nil:
				if e["reason"] == "idle" {
					poolDestroys[sid]++
					byReplica[g.URL]++
				} else {
					t.Errorf("replica %s destroyed %s for %v", g.URL, sid, e["reason"])
				}
			case e["msg"] == "sandbox destroyed" && e["incarnation"] != nil:
				backendDestroys[sid]++
			case e["msg"] == "reap":
				t.Errorf("replica %s failed a reap: %v", g.URL, e)
			}
		}
	}
	for sid, th := range idleIDs {
		if poolDestroys[sid] != 1 || backendDestroys[sid] != 1 {
			t.Errorf("idle thread %s: destroyed %d times by the pools, %d by the backends; want 1 and 1",
				th, poolDestroys[sid], backendDestroys[sid])
		}
	}
	if poolDestroys[busyID] != 0 || backendDestroys[busyID] != 0 {
		t.Errorf("busy thread destroyed %d/%d times", poolDestroys[busyID], backendDestroys[busyID])
	}
	var destroys, claims float64
	for _, g := range replicas {
		m, _ := scrape(t, g)
		destroys += m[`sandgate_sandbox_destroys_total{reason="idle"}`]
		claims += m[`sandgate_reaper_claims_total{reason="idle_active"}`] + m[`sandgate_reaper_claims_total{reason="idle_warm"}`]
	}
	if destroys != idle || claims != idle {
		t.Errorf("replicas count %v idle destroys and %v reaper claims, want %d of each", destroys, claims, idle)
	}
	var who []string
	for _, g := range replicas {
		who = append(who, fmt.Sprintf("%s:%d", g.URL, byReplica[g.URL]))
	}
	t.Logf("idle sandboxes reaped per replica: %s", strings.Join(who, " "))
}

// logEntries parses a replica's JSON log lines (others are skipped).
func logEntries(t *testing.T, g *gateway) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(g.logs.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// 1,000 threads' sandboxes recorded through a gateway spread their keys
// over every master: each holds between 20% and 50% of them.
//
// The sandboxes come from the remote backend and a provisioner stand-in
// in this test process that answers at once: every record is written by
// the gateway's own acquire path (lock, capacity reservation, create,
// record, index, event) against the Cluster, and nothing but the sandbox
// processes, whose cost has nothing to do with key placement, is left out.
// A thousand real process sandboxes would take minutes on two cores.
//
// Layout 1 put every key in the slot of {default}: one node held them all
// (measured 0 % / 100 % / 0 % of 1,005 keys); layout 2 spreads them.
func TestClusterSpreadsThousandThreadsKeysOverEveryNode(t *testing.T) {
	t.Parallel()
	c := testutil.StartRedisCluster(t, 3)
	prov := newStubProvisioner(t)
	f := newFleetOn(t, c.URL(), "--backend", "remote", "--provisioner-url", prov.URL,
		"--max-sandboxes", "0", "--create-rate", "0", "--max-requests-per-user", "0",
		"--reconcile-interval", "0", "--log-level", "info")
	g := f.start()

	const threads, workers = 1000, 16
	began := time.Now()
	jobs := make(chan int)
	errs := make(chan string, threads)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := recordSandbox(g, fmt.Sprintf("spread-%04d", i)); err != nil {
					errs <- err.Error()
				}
			}
		}()
	}
	for i := range threads {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	elapsed := time.Since(began)
	n := 0
	for e := range errs {
		if n++; n <= 10 {
			t.Error(e)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d creates failed", n, threads)
	}
	if got := prov.created(); got != threads {
		t.Fatalf("the provisioner created %d sandboxes, want %d", got, threads)
	}
	t.Logf("%d sandboxes recorded through the gateway in %s (%.0f/s)", threads, elapsed.Round(time.Millisecond),
		float64(threads)/elapsed.Seconds())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	per, err := c.KeysPerNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, k := range per {
		total += k
	}
	if total < threads {
		t.Fatalf("the cluster holds %d keys for %d recorded sandboxes", total, threads)
	}
	var shares []string
	var bad []string
	for _, addr := range c.Addrs() {
		pct := 100 * float64(per[addr]) / float64(total)
		shares = append(shares, fmt.Sprintf("%s %d keys (%.1f%%)", addr, per[addr], pct))
		if pct < 20 || pct > 50 {
			bad = append(bad, addr)
		}
	}
	sort.Strings(bad)
	t.Logf("keys per node, %d in all: %s", total, strings.Join(shares, ", "))
	if len(bad) > 0 {
		t.Errorf("nodes %s hold less than 20%% or more than 50%% of the keys: %s", strings.Join(bad, " "), strings.Join(shares, ", "))
	}
}

// recordSandbox is PUT /threads/{thread}/sandbox until it answers with
// the sandbox (a 503 means the create goes on: ask again).
func recordSandbox(g *gateway, thread string) error {
	for attempt := 0; ; attempt++ {
		req, _ := http.NewRequest("PUT", g.URL+"/threads/"+thread+"/sandbox", nil)
		resp, err := g.client.Do(req)
		if err != nil {
			return fmt.Errorf("PUT %s: %w", thread, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == 200 || resp.StatusCode == 201:
			return nil
		case resp.StatusCode == 503 && attempt < 20:
			time.Sleep(100 * time.Millisecond)
		default:
			return fmt.Errorf("PUT %s: %d %s", thread, resp.StatusCode, body)
		}
	}
}

// stubProvisioner is a DeerFlow-compatible provisioner (mount contract v2)
// whose sandboxes exist only as entries in a map: each sandbox_url is this
// server's /sbx/{id}, where GET /v1/sandbox answers 200.
type stubProvisioner struct {
	*httptest.Server
	mu        sync.Mutex
	sandboxes map[string]api.ProvisionerSandbox
	creates   int
}

func newStubProvisioner(t *testing.T) *stubProvisioner {
	p := &stubProvisioner{sandboxes: map[string]api.ProvisionerSandbox{}}
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { reply(w, map[string]string{"status": "ok"}) })
	mux.HandleFunc("GET /api/capabilities", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, map[string]int{"mount_contract_version": 2})
	})
	mux.HandleFunc("POST /api/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			SandboxID string `json:"sandbox_id"`
			ThreadID  string `json:"thread_id"`
			UserID    string `json:"user_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.SandboxID == "" {
			http.Error(w, "bad create", 400)
			return
		}
		p.mu.Lock()
		sb, ok := p.sandboxes[in.SandboxID]
		if !ok {
			sb = api.ProvisionerSandbox{SandboxID: in.SandboxID, SandboxURL: "http://" + r.Host + "/sbx/" + in.SandboxID, Status: "Running",
				UserID: in.UserID, ThreadID: in.ThreadID, MountContractVersion: 2}
			p.sandboxes[in.SandboxID] = sb
			p.creates++
		}
		p.mu.Unlock()
		reply(w, sb)
	})
	mux.HandleFunc("GET /api/sandboxes", func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		list := make([]api.ProvisionerSandbox, 0, len(p.sandboxes))
		for _, sb := range p.sandboxes {
			list = append(list, sb)
		}
		p.mu.Unlock()
		reply(w, map[string]any{"sandboxes": list})
	})
	mux.HandleFunc("GET /api/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		sb, ok := p.sandboxes[r.PathValue("id")]
		p.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		reply(w, sb)
	})
	mux.HandleFunc("DELETE /api/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		delete(p.sandboxes, r.PathValue("id"))
		p.mu.Unlock()
		reply(w, map[string]bool{"ok": true})
	})
	mux.HandleFunc("GET /sbx/{id}/v1/sandbox", func(w http.ResponseWriter, _ *http.Request) { reply(w, map[string]bool{"ok": true}) })
	p.Server = httptest.NewServer(mux)
	t.Cleanup(p.Close)
	return p
}

func (p *stubProvisioner) created() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.creates
}
