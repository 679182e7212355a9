package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/identity"
)

func TestThreadKeepsItsSandboxAndFiles(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()

	first := shell(t, g.URL, "alpha", "echo hello > /mnt/user-data/workspace/a.txt && pwd")
	if first.ExitCode == nil || *first.ExitCode != 0 || strings.TrimSpace(first.Output) != "/mnt/user-data/workspace" {
		t.Fatalf("first exec: %+v", first)
	}
	v1 := sandboxOf(t, g.URL, "alpha")
	if v1.SandboxID != identity.SandboxID("default", "alpha") || v1.State != "active" {
		t.Fatalf("sandbox view: %+v", v1)
	}
	again := shell(t, g.URL, "alpha", "cat /mnt/user-data/workspace/a.txt")
	if strings.TrimSpace(again.Output) != "hello" {
		t.Fatalf("file did not persist: %+v", again)
	}
	if v2 := sandboxOf(t, g.URL, "alpha"); v2.SandboxID != v1.SandboxID {
		t.Fatalf("second call got another sandbox: %s vs %s", v2.SandboxID, v1.SandboxID)
	}
	other := shell(t, g.URL, "beta", "cat /mnt/user-data/workspace/a.txt 2>/dev/null || echo missing")
	if strings.TrimSpace(other.Output) != "missing" {
		t.Fatalf("thread beta sees alpha's file: %+v", other)
	}
	if n := len(f.sandboxes()); n != 2 {
		t.Fatalf("%d sandboxes for 2 threads", n)
	}
	host := filepath.Join(f.dataDir, "users", "default", "threads", "alpha", "user-data", "workspace", "a.txt")
	if b, err := os.ReadFile(host); err != nil || string(b) != "hello\n" {
		t.Fatalf("host file %s: %q %v", host, b, err)
	}
	// The id route reaches the same sandbox and never provisions.
	code, body, _ := call(t, "POST", g.URL+"/sandboxes/"+v1.SandboxID+"/v1/file/read", map[string]any{"file": "/mnt/user-data/workspace/a.txt"})
	if code != 200 || !strings.Contains(string(body), "hello") {
		t.Fatalf("read by sandbox id: %d %s", code, body)
	}
	code, body, _ = call(t, "GET", g.URL+"/sandboxes/"+identity.SandboxID("default", "nobody")+"/v1/sandbox", nil)
	if code != 404 || errorCode(t, body) != "not_found" {
		t.Fatalf("unknown sandbox id: %d %s", code, body)
	}
	if n := len(f.sandboxes()); n != 2 {
		t.Fatalf("the id route provisioned: %d sandboxes", n)
	}
}

func TestBadThreadIDsRejectedBeforeIO(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	f.redis.Stop() // any I/O would now be a 503, not a 400
	for _, p := range []string{
		"/threads/../v1/sandbox",
		"/threads/%2E%2E/v1/sandbox",
		"/threads/a%2Fb/v1/sandbox",
		"/threads/" + strings.Repeat("x", 200) + "/v1/sandbox",
		"/threads/%C3%BC/v1/sandbox",
		"/threads/a%20b/v1/sandbox",
		"/threads//v1/sandbox",
		"/threads/./sandbox",
	} {
		req, _ := http.NewRequest("GET", g.URL+p, nil)
		req.URL.Opaque = p[:strings.Index(p, "/v1")+1] + p[strings.Index(p, "/v1")+1:] // send the path verbatim
		if strings.HasSuffix(p, "/./sandbox") {
			req.URL.Opaque = p
		}
		resp, err := clientFor(req.URL.String()).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: status %d (%s), want JSON 400", p, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	if n := len(f.sandboxes()); n != 0 {
		t.Fatalf("bad ids created %d sandboxes", n)
	}
}

func TestSSEStreamsEventByEvent(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	checkSSEStreams(t, f, g, "sse")
}

// checkSSEStreams runs a command in thread's sandbox whose output streams
// as SSE, and checks its first event arrives before the command ends.
func checkSSEStreams(t *testing.T, f *fleet, g *gateway, thread string) {
	t.Helper()
	shell(t, g.URL, thread, "true") // provision first
	gate := filepath.Join(f.dataDir, "users", "default", "threads", thread, "user-data", "workspace", "go")
	// A gateway that buffered the stream would never show first-chunk and
	// the command would wait for its gate forever: the deadline ends that.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", g.URL+"/threads/"+thread+"/v1/shell/exec", strings.NewReader(
		`{"command":"echo first-chunk; while [ ! -f /mnt/user-data/workspace/go ]; do sleep 0.02; done; echo second-chunk"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := clientFor(req.URL.String()).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	// The command cannot finish until the test creates the gate file, so
	// seeing first-chunk proves the gateway forwarded it before the end.
	sc := bufio.NewScanner(resp.Body)
	var seen strings.Builder
	for sc.Scan() {
		seen.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "first-chunk") {
			break
		}
	}
	if !strings.Contains(seen.String(), "first-chunk") {
		t.Fatalf("stream ended before the first chunk: %s", seen.String())
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		seen.WriteString(sc.Text() + "\n")
	}
	if !strings.Contains(seen.String(), "second-chunk") {
		t.Fatalf("second chunk missing: %s", seen.String())
	}
}

func TestKilledSandboxIsRecreatedWithFiles(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	shell(t, g.URL, "phoenix", "echo kept > /mnt/user-data/workspace/k.txt")
	before := f.sandboxes()
	if len(before) != 1 {
		t.Fatalf("%d sandboxes", len(before))
	}
	pid, _ := strconv.Atoi(strings.SplitN(before[0].Incarnation, "-", 2)[0])
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill sandbox: %v", err)
	}
	// Dead as the network sees it: a Go process's leader can be a zombie while
	// its other threads still hold the sockets open.
	waitFor(t, func() bool {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(before[0].URL, "http://"), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil && len(f.sandboxes()) == 0
	})
	// The gateway still has the route cached: the dial fails, it re-acquires,
	// finds the sandbox dead and recreates it, all inside this one request.
	d := shell(t, g.URL, "phoenix", "cat /mnt/user-data/workspace/k.txt")
	if strings.TrimSpace(d.Output) != "kept" {
		t.Fatalf("after recreate: %+v", d)
	}
	after := f.sandboxes()
	if len(after) != 1 || after[0].Incarnation == before[0].Incarnation {
		t.Fatalf("want one new incarnation, got %+v (before %+v)", after, before)
	}
}

func TestRedisDownAnswers503AndRecovers(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	shell(t, g.URL, "steady", "true")
	f.redis.Stop()
	code, body, hdr := call(t, "POST", g.URL+"/threads/newcomer/v1/shell/exec", map[string]any{"command": "true"})
	if code != 503 || errorCode(t, body) != "state_unavailable" || hdr.Get("Retry-After") == "" {
		t.Fatalf("redis down: %d %s retry-after=%q", code, body, hdr.Get("Retry-After"))
	}
	if code, _, _ := call(t, "GET", g.URL+"/readyz", nil); code != 503 {
		t.Fatalf("readyz with redis down: %d", code)
	}
	f.redis.Start() // empty: a restart without persistence
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, _ := call(t, "GET", g.URL+"/readyz", nil)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz did not recover")
		}
		time.Sleep(50 * time.Millisecond)
	}
	shell(t, g.URL, "newcomer", "true")
	// The old thread's sandbox survived the Redis loss: it is adopted, not duplicated.
	d := shell(t, g.URL, "steady", "echo ok")
	if strings.TrimSpace(d.Output) != "ok" {
		t.Fatalf("steady after restart: %+v", d)
	}
	if n := len(f.sandboxes()); n != 2 {
		t.Fatalf("%d sandboxes after redis restart, want 2", n)
	}
}

func TestShutdownDrainsAndLeavesSandboxes(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	shell(t, g.URL, "drain", "true")
	ws := filepath.Join(f.dataDir, "users", "default", "threads", "drain", "user-data", "workspace")
	res := execAsync(g.URL, "drain", "touch /mnt/user-data/workspace/started; "+
		"while [ ! -f /mnt/user-data/workspace/go ]; do sleep 0.02; done; echo finished")
	// The command made its marker: the request is in flight in the sandbox.
	waitFor(t, func() bool { _, err := os.Stat(filepath.Join(ws, "started")); return err == nil })
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The gateway is draining: it said so, and its listener is closed.
	waitFor(t, func() bool {
		if !strings.Contains(g.logs.String(), `"msg":"draining"`) {
			return false
		}
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(g.URL, "http://"), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if err := os.WriteFile(filepath.Join(ws, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := await(t, res, 30*time.Second)
	if strings.TrimSpace(d.Output) != "finished" {
		t.Fatalf("in-flight request during drain: %+v", d)
	}
	select {
	case <-g.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not exit within 30s of its last request finishing")
	}
	if n := len(f.sandboxes()); n != 1 {
		t.Fatalf("shutdown destroyed sandboxes: %d left", n)
	}
}

// execResult is how an exec sent by execAsync ended.
type execResult struct {
	code int
	body []byte
	err  error
}

// execAsync sends an exec to thread's sandbox from another goroutine; the
// outcome, error included, comes back on the channel (no t.Fatal off the
// test's goroutine, which would leave the test waiting forever).
func execAsync(base, thread, command string) <-chan execResult {
	res := make(chan execResult, 1)
	go func() {
		b, _ := json.Marshal(map[string]any{"command": command})
		req, err := http.NewRequest("POST", base+"/threads/"+thread+"/v1/shell/exec", bytes.NewReader(b))
		if err != nil {
			res <- execResult{err: err}
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := clientFor(req.URL.String()).Do(req)
		if err != nil {
			res <- execResult{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		res <- execResult{code: resp.StatusCode, body: body, err: err}
	}()
	return res
}

// await waits up to bound for an execAsync result and fails the test unless
// it is a completed command.
func await(t *testing.T, res <-chan execResult, bound time.Duration) execData {
	t.Helper()
	var r execResult
	select {
	case r = <-res:
	case <-time.After(bound):
		t.Fatalf("no answer to the exec in %s", bound)
	}
	if r.err != nil || r.code != 200 {
		t.Fatalf("exec: status %d, err %v: %s", r.code, r.err, r.body)
	}
	var env envelope
	var d execData
	if err := json.Unmarshal(r.body, &env); err != nil || json.Unmarshal(env.Data, &d) != nil {
		t.Fatalf("exec: bad body %s", r.body)
	}
	return d
}

func TestRefusesPublicListenWithoutAuth(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	out, err := exec.Command(f.bin, "--listen", "0.0.0.0:0", "--redis-url", f.redis.URL(), "--data-dir", f.dataDir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--insecure") {
		t.Fatalf("want refusal naming --insecure, got err=%v out=%s", err, out)
	}
}

// waitFor polls cond for up to 30s: long enough for a 2-core machine at
// load 20, short enough that a broken feature fails by name in seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSandboxKilledMidRequestIs502ThenRecreated(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	shell(t, g.URL, "crash", "echo safe > /mnt/user-data/workspace/s.txt")
	res := execAsync(g.URL, "crash", "sleep 30")
	var pid int
	waitFor(t, func() bool {
		s := f.sandboxes()
		if len(s) != 1 {
			return false
		}
		pid, _ = strconv.Atoi(strings.SplitN(s[0].Incarnation, "-", 2)[0])
		// The sleep runs inside this test's sandbox: a descendant of its
		// pid, not any "sleep 30" another test happens to run.
		for _, c := range descendants(pid) {
			if cmdline(c) == "sleep 30" {
				return true
			}
		}
		return false
	})
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var r execResult
	select {
	case r = <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("no answer 30s after the sandbox was killed mid-request")
	}
	if r.err != nil || r.code != 502 || errorCode(t, r.body) != "sandbox_connection_lost" {
		t.Fatalf("killed mid-request: %d %v %s", r.code, r.err, r.body)
	}
	waitFor(t, func() bool { return len(f.sandboxes()) == 0 })
	if d := shell(t, g.URL, "crash", "cat /mnt/user-data/workspace/s.txt"); strings.TrimSpace(d.Output) != "safe" {
		t.Fatalf("next call: %+v", d)
	}
}

// descendants lists every live process below pid, from /proc.
func descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// cmdline is pid's command line, arguments joined by spaces.
func cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// TestStaleRouteOnAnotherReplicaReResolves: replica B still caches the
// route of a sandbox that died and that replica A has since recreated.
// B's next request must reach the new incarnation with its new secret,
// never the new sandbox with the old secret (which its server refuses:
// 401), because each incarnation listens on a socket of its own name.
func TestStaleRouteOnAnotherReplicaReResolves(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--cache-ttl", "1h")
	a, b := f.start(), f.start()
	shell(t, a.URL, "stale", "echo kept > /mnt/user-data/workspace/k.txt")
	shell(t, b.URL, "stale", "true") // B caches the route
	before := f.sandboxes()
	if len(before) != 1 {
		t.Fatalf("%d sandboxes", len(before))
	}
	pid, _ := strconv.Atoi(strings.SplitN(before[0].Incarnation, "-", 2)[0])
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill sandbox: %v", err)
	}
	waitFor(t, func() bool { return len(f.sandboxes()) == 0 })
	shell(t, a.URL, "stale", "true") // A recreates it
	if after := f.sandboxes(); len(after) != 1 || after[0].Incarnation == before[0].Incarnation {
		t.Fatalf("want one new incarnation, got %+v", after)
	}
	if d := shell(t, b.URL, "stale", "cat /mnt/user-data/workspace/k.txt"); strings.TrimSpace(d.Output) != "kept" {
		t.Fatalf("through the replica with the stale route: %+v", d)
	}
}
