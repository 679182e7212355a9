package e2e

import (
	"bufio"
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
	shell(t, g.URL, "sse", "true") // provision first
	gate := filepath.Join(f.dataDir, "users", "default", "threads", "sse", "user-data", "workspace", "go")
	req, _ := http.NewRequest("POST", g.URL+"/threads/sse/v1/shell/exec", strings.NewReader(
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
	gate := filepath.Join(f.dataDir, "users", "default", "threads", "drain", "user-data", "workspace", "go")
	res := make(chan execData, 1)
	go func() {
		res <- shell(t, g.URL, "drain", "while [ ! -f /mnt/user-data/workspace/go ]; do sleep 0.02; done; echo finished")
	}()
	// Wait until the request is in flight, then ask the gateway to stop.
	waitFor(t, func() bool { return strings.Contains(g.logs.String(), `"drain"`) || true })
	time.Sleep(200 * time.Millisecond)
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := <-res
	if strings.TrimSpace(d.Output) != "finished" {
		t.Fatalf("in-flight request during drain: %+v", d)
	}
	<-g.done
	if n := len(f.sandboxes()); n != 1 {
		t.Fatalf("shutdown destroyed sandboxes: %d left", n)
	}
}

func TestRefusesPublicListenWithoutAuth(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	out, err := exec.Command(f.bin, "--listen", "0.0.0.0:0", "--redis-url", f.redis.URL(), "--data-dir", f.dataDir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--insecure") {
		t.Fatalf("want refusal naming --insecure, got err=%v out=%s", err, out)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSandboxKilledMidRequestIs502ThenRecreated(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	shell(t, g.URL, "crash", "echo safe > /mnt/user-data/workspace/s.txt")
	res := make(chan []byte, 1)
	codes := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", g.URL+"/threads/crash/v1/shell/exec",
			strings.NewReader(`{"command":"sleep 30"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := clientFor(req.URL.String()).Do(req)
		if err != nil {
			codes <- 0
			res <- []byte(err.Error())
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		codes <- resp.StatusCode
		res <- b
	}()
	var pid int
	waitFor(t, func() bool {
		s := f.sandboxes()
		if len(s) != 1 {
			return false
		}
		pid, _ = strconv.Atoi(strings.SplitN(s[0].Incarnation, "-", 2)[0])
		// the sleep is running inside the sandbox
		out, _ := exec.Command("pgrep", "-f", "sleep 30").Output()
		return len(out) > 0
	})
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code, body := <-codes, <-res
	if code != 502 || errorCode(t, body) != "sandbox_connection_lost" {
		t.Fatalf("killed mid-request: %d %s", code, body)
	}
	waitFor(t, func() bool { return len(f.sandboxes()) == 0 })
	if d := shell(t, g.URL, "crash", "cat /mnt/user-data/workspace/s.txt"); strings.TrimSpace(d.Output) != "safe" {
		t.Fatalf("next call: %+v", d)
	}
}
