// Package e2e drives real gateway processes over real HTTP, with a real
// redis-server and real sandbox processes.
package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/testutil"
)

// gateway is one gateway replica process.
type gateway struct {
	client *http.Client
	t      *testing.T
	URL    string
	cmd    *exec.Cmd
	logs   *testutil.LogBuffer
	done   chan struct{}
}

// fleet is what replicas of one test share: Redis and the data dir.
type fleet struct {
	t        *testing.T
	redis    *testutil.Redis // nil on a fleet of newFleetOn
	redisURL string          // the replicas' --redis-url
	dataDir  string
	bin      string
	extra    []string
	env      []string // added to each replica's environment (KEY=VALUE)
	replicas []*gateway
}

// newFleet starts a redis-server and prepares a data dir; replicas are
// started with start(). At cleanup every sandbox the fleet made is destroyed.
func newFleet(t *testing.T, extra ...string) *fleet {
	t.Helper()
	r := testutil.StartRedis(t)
	f := newFleetOn(t, r.URL(), extra...)
	f.redis = r
	return f
}

// newFleetOn is newFleet on the Redis at redisURL (a Cluster, say), which
// the test started and stops.
func newFleetOn(t *testing.T, redisURL string, extra ...string) *fleet {
	t.Helper()
	f := &fleet{t: t, redisURL: redisURL, dataDir: t.TempDir(), bin: testutil.GatewayBinary(t), extra: extra}
	t.Cleanup(f.cleanup)
	return f
}

// TestHTTPImplEnv names the HTTP stacks every replica the harness starts
// runs on: "net/http" runs the suite on the standard library's server and
// transport (server_impl and transport_impl, the fallbacks); unset or
// "sandgate", the default stacks. A test's own flags come after, and win.
const TestHTTPImplEnv = "SANDGATE_TEST_HTTP_IMPL"

func httpImplArgs() []string {
	impl := os.Getenv(TestHTTPImplEnv)
	if impl == "" {
		return nil
	}
	return []string{"--server-impl", impl, "--transport-impl", impl}
}

// start starts a replica. A port FreePort handed out can be taken by
// another test's gateway before this one binds it (the isolation probe runs
// first); healthz would then answer for the other gateway, so a replica
// counts as up only once it logged that it listens, and a lost port is
// retried on another.
func (f *fleet) start(extra ...string) *gateway {
	f.t.Helper()
	for attempt := 1; ; attempt++ {
		if g := f.launch(extra, attempt == 3); g != nil {
			return g
		}
	}
}

// launch starts a replica on a free port; nil when the port was taken
// meanwhile (last: fail the test instead).
func (f *fleet) launch(extra []string, last bool) *gateway {
	f.t.Helper()
	port := testutil.FreePort(f.t)
	args := append([]string{
		"--listen", "127.0.0.1:" + strconv.Itoa(port),
		"--redis-url", f.redisURL,
		"--data-dir", f.dataDir,
		"--log-format", "json",
		"--log-level", "debug",
	}, httpImplArgs()...)
	args = append(args, f.extra...)
	args = append(args, extra...)
	g := &gateway{t: f.t, URL: fmt.Sprintf("http://127.0.0.1:%d", port), logs: &testutil.LogBuffer{}, done: make(chan struct{}),
		client: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}}}
	clients.Store(g.URL, g.client)
	g.cmd = exec.Command(f.bin, args...)
	if len(f.env) > 0 {
		g.cmd.Env = append(os.Environ(), f.env...)
	}
	g.cmd.Stdout, g.cmd.Stderr = g.logs, g.logs
	if err := g.cmd.Start(); err != nil {
		f.t.Fatalf("start gateway: %v", err)
	}
	go func() { _ = g.cmd.Wait(); close(g.done) }()
	f.replicas = append(f.replicas, g) // killed at cleanup if the test fails below
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := g.client.Get(g.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 && strings.Contains(g.logs.String(), `"gateway listening"`) {
				return g
			}
		}
		select {
		case <-g.done:
			if !last && strings.Contains(g.logs.String(), "address already in use") {
				g.forget()
				f.replicas = f.replicas[:len(f.replicas)-1]
				return nil
			}
			f.t.Fatalf("gateway exited at start:\n%s", g.logs)
		default:
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("gateway did not become healthy:\n%s", g.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (g *gateway) kill() {
	_ = g.cmd.Process.Signal(syscall.SIGKILL)
	<-g.done
	g.forget()
}

// Each replica has its own client: tests run in parallel and a later test's
// gateway may listen on a port a dead one used; a keep-alive connection
// pooled for the dead one must never carry the new one's requests.
var clients sync.Map // gateway base URL -> *http.Client

// clientFor is the client of the replica at rawURL's host.
func clientFor(rawURL string) *http.Client {
	if u, err := url.Parse(rawURL); err == nil {
		if c, ok := clients.Load(u.Scheme + "://" + u.Host); ok {
			return c.(*http.Client)
		}
	}
	return http.DefaultClient
}

// forget drops the replica's client once it is gone.
func (g *gateway) forget() {
	g.client.CloseIdleConnections()
	clients.CompareAndDelete(g.URL, g.client)
}

func (g *gateway) stop() {
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
		g.forget()
	case <-time.After(40 * time.Second):
		g.t.Errorf("gateway did not stop on SIGTERM")
		g.kill()
	}
}

func (f *fleet) cleanup() {
	for _, g := range f.replicas {
		select {
		case <-g.done:
			g.forget()
		default:
			g.kill()
		}
		if f.t.Failed() {
			f.t.Logf("gateway %s logs:\n%s", g.URL, tail(g.logs.String(), 60))
		}
	}
	for _, info := range f.sandboxes() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = f.backend().Destroy(ctx, info)
		cancel()
	}
}

// backend is a process backend over the fleet's state dir: it sees every
// sandbox any replica made.
func (f *fleet) backend() *process.Process {
	p, err := process.New(process.Config{Binary: f.bin, StateDir: filepath.Join(f.dataDir, "sandboxes", "process")}, nil)
	if err != nil {
		f.t.Fatalf("process backend: %v", err)
	}
	return p
}

// sandboxes lists the live sandbox processes of the fleet.
func (f *fleet) sandboxes() []backend.Info {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := f.backend().List(ctx)
	if err != nil {
		f.t.Fatalf("list sandboxes: %v", err)
	}
	return list
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// envelope is the sandbox API's response shape.
type envelope struct {
	Success bool            `json:"success"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
	// Error is the gateway's own error envelope (the sandbox's API has
	// Message): said names whichever of the two the body carries.
	Error struct{ Code, Message string } `json:"error"`
}

// said is the message of an error body in either envelope.
func (e envelope) said() string { return cmp.Or(e.Message, e.Error.Message) }

type execData struct {
	SessionID string `json:"session_id"`
	Status    string `json:"status"`
	Output    string `json:"output"`
	ExitCode  *int   `json:"exit_code"`
}

func call(t *testing.T, method, url string, body any, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := clientFor(url).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

// shell runs command in thread's sandbox through gateway base (with the
// headers hdr, name then value) and returns the output; it fails the test
// on anything but a completed command.
func shell(t *testing.T, base, thread, command string, hdr ...string) execData {
	t.Helper()
	code, body, _ := call(t, "POST", base+"/threads/"+thread+"/v1/shell/exec", map[string]any{"command": command}, hdr...)
	if code != 200 {
		t.Fatalf("exec %q: status %d: %s", command, code, body)
	}
	var env envelope
	var d execData
	if err := json.Unmarshal(body, &env); err != nil || json.Unmarshal(env.Data, &d) != nil {
		t.Fatalf("exec %q: bad body %s", command, body)
	}
	return d
}

type sandboxView struct {
	SandboxID string `json:"sandbox_id"`
	State     string `json:"state"`
	Outcome   string `json:"outcome"`
	URL       string `json:"url"`
}

func sandboxOf(t *testing.T, base, thread string) sandboxView {
	t.Helper()
	code, body, _ := call(t, "GET", base+"/threads/"+thread+"/sandbox", nil)
	if code != 200 {
		t.Fatalf("GET sandbox of %s: %d %s", thread, code, body)
	}
	var v sandboxView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" {
		t.Fatalf("not a JSON error: %s", body)
	}
	return e.Error.Code
}
