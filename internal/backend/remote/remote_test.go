package remote

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/backend/backendtest"
	"github.com/sandgate/sandgate/internal/backend/process"
	"github.com/sandgate/sandgate/internal/testutil"
)

// provisioner stands in for DeerFlow's provisioner service, following its
// contract: X-API-Key, 404 for unknown ids, Pod-phase status, idempotent
// create. Its sandboxes are real sandbox server processes.
type provisioner struct {
	t       *testing.T
	srv     *httptest.Server
	key     string
	version int // mount contract; 0 = a provisioner without /api/capabilities
	procs   *process.Process
	dataDir string

	mu        sync.Mutex
	sandboxes map[string]*provisioned
	keys      []string       // X-API-Key of every call
	edit      func(*sandbox) // tampers with answers
}

type provisioned struct {
	info         backend.Info
	user, thread string
	status       string
	url          string // the sandbox on a TCP port, as a DeerFlow provisioner hands it out
	closeFront   func()
}

func newProvisioner(t *testing.T, version int) *provisioner {
	t.Helper()
	procs, err := process.New(process.Config{Binary: testutil.GatewayBinary(t), StateDir: t.TempDir()}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	p := &provisioner{t: t, key: "secret-key", version: version, procs: procs, dataDir: t.TempDir(), sandboxes: map[string]*provisioned{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() {
		p.srv.Close()
		for _, sb := range p.sandboxes {
			_ = procs.Destroy(context.Background(), sb.info)
		}
	})
	return p
}

func (p *provisioner) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append(p.keys, r.Header.Get("X-API-Key"))
	if r.Header.Get("X-API-Key") != p.key {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"detail": "Invalid or missing API key"})
		return
	}
	id := strings.TrimPrefix(r.URL.Path, "/api/sandboxes/")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/capabilities" && p.version > 0:
		writeJSON(w, 200, map[string]any{"mount_contract_version": p.version})
	case r.Method == http.MethodPost && r.URL.Path == "/api/sandboxes":
		p.create(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/api/sandboxes":
		list := []sandbox{}
		for id, sb := range p.sandboxes {
			list = append(list, p.view(id, sb))
		}
		writeJSON(w, 200, map[string]any{"sandboxes": list, "count": len(list)})
	case r.Method == http.MethodGet && id != r.URL.Path:
		sb, ok := p.sandboxes[id]
		if !ok {
			writeJSON(w, 404, map[string]any{"detail": "Sandbox '" + id + "' not found"})
			return
		}
		writeJSON(w, 200, p.view(id, sb))
	case r.Method == http.MethodDelete && id != r.URL.Path:
		sb, ok := p.sandboxes[id]
		if !ok {
			writeJSON(w, 404, map[string]any{"detail": "Sandbox '" + id + "' not found"})
			return
		}
		if err := p.procs.Destroy(r.Context(), sb.info); err != nil {
			writeJSON(w, 500, map[string]any{"detail": err.Error()})
			return
		}
		sb.closeFront()
		delete(p.sandboxes, id)
		writeJSON(w, 200, map[string]any{"ok": true, "sandbox_id": id})
	default:
		writeJSON(w, 404, map[string]any{"detail": "Not Found"})
	}
}

func (p *provisioner) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SandboxID string `json:"sandbox_id"`
		ThreadID  string `json:"thread_id"`
		UserID    string `json:"user_id"`
		Required  *int   `json:"required_mount_contract_version"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 422, map[string]any{"detail": err.Error()})
		return
	}
	if req.Required != nil && *req.Required != p.version {
		writeJSON(w, 409, map[string]any{"detail": map[string]any{"code": "mount_contract_changed", "expected": *req.Required, "actual": p.version}})
		return
	}
	sb, ok := p.sandboxes[req.SandboxID]
	if !ok {
		mounts, err := backend.ThreadMounts(backend.MountConfig{DataDir: p.dataDir}, req.UserID, req.ThreadID)
		if err == nil {
			var info backend.Info
			info, err = p.procs.Create(r.Context(), backend.Spec{SandboxID: req.SandboxID, User: req.UserID, Thread: req.ThreadID, Mounts: mounts})
			sb = &provisioned{info: info, user: req.UserID, thread: req.ThreadID, status: "Running"}
			if err == nil {
				sb.url, sb.closeFront = testutil.TCPFront(p.t, info.URL)
			}
		}
		if err != nil {
			writeJSON(w, 500, map[string]any{"detail": err.Error()})
			return
		}
		p.sandboxes[req.SandboxID] = sb
	}
	writeJSON(w, 200, p.view(req.SandboxID, sb))
}

func (p *provisioner) view(id string, sb *provisioned) sandbox {
	v := sandbox{SandboxID: id, SandboxURL: sb.url, Status: sb.status, UserID: sb.user, ThreadID: sb.thread}
	if p.version > 0 {
		v.MountContractVersion = new(p.version)
	}
	if p.edit != nil {
		p.edit(&v)
	}
	return v
}

func (p *provisioner) setEdit(edit func(*sandbox)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.edit = edit
}

func (p *provisioner) setStatus(id, status string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sandboxes[id].status = status
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func testLog(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

func newRemote(t *testing.T, url, key string) *Remote {
	t.Helper()
	r, err := New(Config{URL: url, APIKey: key}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestContract runs the shared contract through the stand-in provisioner;
// every instance is a client of its own.
func TestContract(t *testing.T) {
	t.Parallel()
	p := newProvisioner(t, 2)
	backendtest.Run(t, backendtest.Harness{
		Name: Name,
		New:  func(t *testing.T) backend.Backend { return newRemote(t, p.srv.URL, p.key) },
		// DeerFlow's API carries no secret, no labels, no incarnation.
		NoSecret: true, IDLabelsOnly: true, DestroyIgnoresIncarnation: true,
	})
}

// The contract has the lifecycle; this is what is DeerFlow's own: Ping
// without /health, a base URL with a trailing slash, the API key on every call.
func TestLifecycleAgainstDeerFlowsContract(t *testing.T) {
	t.Parallel()
	p := newProvisioner(t, 2)
	r := newRemote(t, p.srv.URL+"/", p.key) // a trailing slash, as configs have it
	s := backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "alice", "t1")

	if err := r.Ping(backendtest.Ctx(t)); err != nil {
		t.Errorf("Ping = %v (a provisioner without /health answers 404: up)", err)
	}
	info, err := r.Create(backendtest.Ctx(t), s)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if info.SandboxID != s.SandboxID || info.URL == "" || info.Incarnation != incarnationOf(info.URL) || info.Backend != Name ||
		info.User != "alice" || info.Thread != "t1" {
		t.Errorf("info = %+v", info)
	}
	if out := backendtest.Exec(t, info, "echo from-remote"); !strings.Contains(out.Output, "from-remote") {
		t.Errorf("exec on sandbox_url: %+v", out)
	}
	if err := r.Destroy(backendtest.Ctx(t), info); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range p.keys {
		if k != p.key {
			t.Fatalf("a call went without the API key: %q", p.keys)
		}
	}
}

func TestStatusAndIncarnation(t *testing.T) {
	t.Parallel()
	p := newProvisioner(t, 2)
	r := newRemote(t, p.srv.URL, p.key)
	s := backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "bob", "t")
	info, err := r.Create(backendtest.Ctx(t), s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Destroy(context.Background(), info) })

	other := info
	other.Incarnation = "http://127.0.0.1:1" // an earlier sandbox at another address
	if ok, err := r.Alive(backendtest.Ctx(t), other); err != nil || ok {
		t.Errorf("Alive of another incarnation = %v, %v", ok, err)
	}
	for _, status := range []string{"Pending", "Failed", "Succeeded"} {
		p.setStatus(s.SandboxID, status)
		if ok, err := r.Alive(backendtest.Ctx(t), info); err != nil || ok {
			t.Errorf("Alive with status %s = %v, %v", status, ok, err)
		}
		if _, ok, err := r.Discover(backendtest.Ctx(t), s.SandboxID); err != nil || ok {
			t.Errorf("Discover with status %s = %v, %v", status, ok, err)
		}
	}
}

func TestMountContract(t *testing.T) {
	t.Parallel()
	t.Run("legacy provisioner serves the default user only", func(t *testing.T) {
		t.Parallel()
		p := newProvisioner(t, 0)
		r := newRemote(t, p.srv.URL, p.key)
		if _, err := r.Create(backendtest.Ctx(t), backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "alice", "t")); err == nil || !strings.Contains(err.Error(), "cannot keep user") {
			t.Fatalf("Create for alice on a v0 provisioner = %v", err)
		}
		info, err := r.Create(backendtest.Ctx(t), backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "default", "t"))
		if err != nil {
			t.Fatalf("Create for the default user: %v", err)
		}
		t.Cleanup(func() { _ = r.Destroy(context.Background(), info) })
		// DeerFlow does not adopt sandboxes of another contract.
		if _, ok, err := r.Discover(backendtest.Ctx(t), info.SandboxID); err != nil || ok {
			t.Errorf("Discover of a v0 sandbox = %v, %v", ok, err)
		}
	})
	t.Run("answer of another contract", func(t *testing.T) {
		t.Parallel()
		p := newProvisioner(t, 2)
		r := newRemote(t, p.srv.URL, p.key)
		p.setEdit(func(v *sandbox) { v.MountContractVersion = new(1) })
		if _, err := r.Create(backendtest.Ctx(t), backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "carol", "t")); err == nil || !strings.Contains(err.Error(), "not the one asked for") {
			t.Fatalf("Create with a v1 answer = %v", err)
		}
	})
	t.Run("identity mismatch", func(t *testing.T) {
		t.Parallel()
		p := newProvisioner(t, 2)
		r := newRemote(t, p.srv.URL, p.key)
		p.setEdit(func(v *sandbox) { v.UserID = "mallory" })
		if _, err := r.Create(backendtest.Ctx(t), backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "dave", "t")); err == nil || !strings.Contains(err.Error(), "not the one asked for") {
			t.Fatalf("Create with another user's answer = %v", err)
		}
	})
}

func TestRefusalsAreNotUnavailable(t *testing.T) {
	t.Parallel()
	p := newProvisioner(t, 2)
	r := newRemote(t, p.srv.URL, "wrong-key")
	_, err := r.Create(backendtest.Ctx(t), backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "erin", "t"))
	if err == nil || errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "401") {
		t.Errorf("Create with a wrong key = %v, want a 401 error that is not ErrUnavailable", err)
	}
	if _, err := r.Alive(backendtest.Ctx(t), backend.Info{SandboxID: "x"}); err == nil {
		t.Error("Alive with a wrong key = nil error")
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close() // nothing listens any more
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 503, map[string]any{"detail": "k8s API unreachable"})
	}))
	t.Cleanup(failing.Close)
	for _, url := range []string{down.URL, failing.URL} {
		r := newRemote(t, url, "")
		info := backend.Info{SandboxID: "abc"}
		_, cerr := r.Create(backendtest.Ctx(t), backendtest.Spec(t, backend.MountConfig{DataDir: t.TempDir()}, "default", "t"))
		_, aerr := r.Alive(backendtest.Ctx(t), info)
		_, _, derr := r.Discover(backendtest.Ctx(t), "abc")
		_, lerr := r.List(backendtest.Ctx(t))
		for name, err := range map[string]error{"Create": cerr, "Alive": aerr, "Discover": derr, "List": lerr,
			"Destroy": r.Destroy(backendtest.Ctx(t), info), "Ping": r.Ping(backendtest.Ctx(t))} {
			if !errors.Is(err, backend.ErrUnavailable) {
				t.Errorf("%s against %s = %v, want ErrUnavailable", name, url, err)
			}
		}
	}
}

func TestTimeouts(t *testing.T) {
	t.Parallel()
	if deerFlowTimeouts.create != 30*time.Second || deerFlowTimeouts.get != 10*time.Second || deerFlowTimeouts.delete != 15*time.Second {
		t.Errorf("timeouts = %+v, want DeerFlow's 30s create, 10s get, 15s delete", deerFlowTimeouts)
	}
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); hung.Close() })
	r := newRemote(t, hung.URL, "")
	r.timeouts = timeouts{create: 100 * time.Millisecond, get: 100 * time.Millisecond, delete: 100 * time.Millisecond,
		list: 100 * time.Millisecond, capabilities: 100 * time.Millisecond}
	began := time.Now()
	_, err := r.Alive(t.Context(), backend.Info{SandboxID: "abc"})
	if !errors.Is(err, backend.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Alive against a hung provisioner = %v", err)
	}
	if err := r.Destroy(t.Context(), backend.Info{SandboxID: "abc"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Destroy against a hung provisioner = %v", err)
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("two calls with 100ms timeouts took %v", d)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for url, ok := range map[string]bool{
		"http://provisioner:8002": true, "https://p.example.com/base": true,
		"": false, "provisioner:8002": false, "ftp://p": false, "http://": false,
	} {
		if err := (Config{URL: url}).Validate(); (err == nil) != ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", url, err, ok)
		}
	}
}
