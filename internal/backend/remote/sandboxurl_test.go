package remote

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/testutil"
)

// hostile is a provisioner on 127.0.0.1 that answers every sandbox with
// the sandbox_url it is told to, echoing the identity asked for (so only
// the URL can be wrong), or redirects every call to redirect when set.
type hostile struct {
	srv       *httptest.Server
	mu        sync.Mutex
	url       string
	redirect  string
	dataPlane int // requests outside /api/ and /health: a sandbox reached on its origin
}

func newHostile(t *testing.T) *hostile {
	t.Helper()
	h := &hostile{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		sandboxURL, redirect := h.url, h.redirect
		if !strings.HasPrefix(r.URL.Path, "/api/") && r.URL.Path != "/health" {
			h.dataPlane++
		}
		h.mu.Unlock()
		if redirect != "" {
			http.Redirect(w, r, redirect+r.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		var req createRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.SandboxID == "" {
			req.SandboxID = "0123456789abcdef"
		}
		sb := sandbox{SandboxID: req.SandboxID, SandboxURL: sandboxURL, Status: statusRunning,
			UserID: req.UserID, ThreadID: req.ThreadID, MountContractVersion: new(mountContractVersion)}
		switch {
		case r.URL.Path == "/api/capabilities":
			writeJSON(w, 200, map[string]any{"mount_contract_version": mountContractVersion})
		case r.Method == http.MethodGet && r.URL.Path == "/api/sandboxes":
			writeJSON(w, 200, map[string]any{"sandboxes": []sandbox{sb}})
		default:
			writeJSON(w, 200, sb)
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hostile) answer(sandboxURL, redirect string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.url, h.redirect = sandboxURL, redirect
}

// TestUnsafeSandboxURLIsNeverDialled: a provisioner answering a
// sandbox_url with userinfo, a query or fragment, dot segments in any
// encoding, an unspecified, link-local, multicast or metadata address, or a
// host that is neither its own nor configured, gets the sandbox refused by
// Create, Discover and List, and nothing connects to the loopback trap the
// URL points at (0.0.0.0 and a name for 127.0.0.1 reach it on Linux). The
// control: the same trap, once its host is configured, is reached.
func TestUnsafeSandboxURLIsNeverDialled(t *testing.T) {
	t.Parallel()
	trap := testutil.NewTrap(t)
	p := newHostile(t)
	r, err := New(Config{URL: p.srv.URL, APIKey: "provisioner-key"}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	port := trap.Port
	spec := backend.Spec{SandboxID: "0123456789abcdef", User: "alice", Thread: "t1"}
	for _, bad := range []string{
		"http://user:pass@127.0.0.1:" + port,
		"http://127.0.0.1:" + port + "@127.0.0.1:" + port,
		trap.URL + "?x=1",
		trap.URL + "?",
		trap.URL + "#frag",
		trap.URL + "/a/../b",
		trap.URL + "/./v",
		trap.URL + "/%2e%2e/x",
		trap.URL + "/%2E./x",
		trap.URL + "/a%2fb",
		trap.URL + "/a%5c..%5cb",
		"http://0.0.0.0:" + port,
		"http://[::]:" + port,
		"http://[::ffff:0.0.0.0]:" + port,
		"http://169.254.169.254/latest/meta-data/",
		"http://[::ffff:169.254.169.254]/",
		"http://[fe80::1%25lo]:" + port,
		"http://224.0.0.1:" + port,
		"http://[ff02::1]:" + port,
		"http://metadata.google.internal/",
		"http://100.100.100.200/",
		"http://[fd00:ec2::254]/",
		"http://localhost:" + port, // another host than the provisioner's 127.0.0.1
		"ftp://127.0.0.1:" + port,
	} {
		p.answer(bad, "")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := r.Create(ctx, spec)
		if err == nil || !errors.Is(err, errSandboxURL) && !strings.HasPrefix(bad, "ftp") {
			t.Errorf("create with sandbox_url %s: %v, want it refused as unsafe", bad, err)
		}
		if _, found, err := r.Discover(ctx, spec.SandboxID); found || err == nil {
			t.Errorf("discover with sandbox_url %s: found=%v err=%v", bad, found, err)
		}
		if list, err := r.List(ctx); err != nil || len(list) != 0 {
			t.Errorf("list with sandbox_url %s: %v %v, want it skipped", bad, list, err)
		}
		cancel()
		if n := trap.Conns(); n != 0 {
			t.Fatalf("sandbox_url %s: the gateway connected to it (%d connections)", bad, n)
		}
		if err != nil && strings.Contains(err.Error(), port) {
			t.Errorf("the refusal shows the URL (it may be a capability): %v", err)
		}
	}

	// Control: the trap is reachable, and is reached once its host is allowed.
	allowed, err := New(Config{URL: p.srv.URL, SandboxHosts: []string{"localhost"}}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	p.answer("http://localhost:"+port, "")
	if _, err := allowed.Create(context.Background(), spec); err != nil || trap.Conns() == 0 {
		t.Fatalf("with provisioner_sandbox_hosts=localhost: %v, %d connections", err, trap.Conns())
	}
}

// TestOwnOriginSandboxURLNamesItsSandbox: a sandbox_url on the
// provisioner's own origin gets the provisioner's API key (another
// Sandgate's admin key) with every request, so it must name the sandbox
// asked for: an answer naming another sandbox, a thread, or the API is
// refused before anything is sent there; its own /sandboxes/{id} and a
// capability URL are accepted.
func TestOwnOriginSandboxURLNamesItsSandbox(t *testing.T) {
	t.Parallel()
	p := newHostile(t)
	r, err := New(Config{URL: p.srv.URL, APIKey: "provisioner-key"}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	spec := backend.Spec{SandboxID: "0123456789abcdef", User: "alice", Thread: "t1"}
	for _, bad := range []string{
		p.srv.URL + "/sandboxes/fedcba9876543210", // bob's sandbox, reached with the admin key
		p.srv.URL + "/sandboxes/0123456789abcdef/v1",
		p.srv.URL + "/threads/t1",
		p.srv.URL + "/api",
		p.srv.URL,
		p.srv.URL + "/c/short",
	} {
		p.answer(bad, "")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if _, err := r.Create(ctx, spec); !errors.Is(err, errSandboxURL) {
			t.Errorf("create with sandbox_url %s: %v, want it refused", bad, err)
		}
		if _, found, err := r.Discover(ctx, spec.SandboxID); found || !errors.Is(err, errSandboxURL) {
			t.Errorf("discover with sandbox_url %s: found=%v err=%v", bad, found, err)
		}
		cancel()
	}
	p.mu.Lock()
	reached := p.dataPlane
	p.mu.Unlock()
	if reached != 0 {
		t.Fatalf("%d data-plane requests reached the provisioner's origin at a URL naming another sandbox", reached)
	}
	for _, good := range []string{
		p.srv.URL + "/sandboxes/0123456789abcdef",
		p.srv.URL + "/c/" + strings.Repeat("aB3-_", 8) + "xyz",
	} {
		if err := r.checkURL(good, spec.SandboxID); err != nil {
			t.Errorf("%s refused: %v", good, err)
		}
	}
}

// TestProvisionerRedirectIsNotFollowed: a provisioner that redirects its
// API calls elsewhere gets an error, and X-API-Key never leaves for the
// redirect's target.
func TestProvisionerRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	trap := testutil.NewTrap(t)
	p := newHostile(t)
	p.answer(p.srv.URL, trap.URL)
	r, err := New(Config{URL: p.srv.URL, APIKey: "provisioner-key"}, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := r.Create(ctx, backend.Spec{SandboxID: "0123456789abcdef", User: "alice", Thread: "t1"}); err == nil {
		t.Error("create through a redirect succeeded")
	}
	if _, _, err := r.Discover(ctx, "0123456789abcdef"); err == nil {
		t.Error("discover through a redirect succeeded")
	}
	if _, err := r.List(ctx); err == nil {
		t.Error("list through a redirect succeeded")
	}
	if err := r.Destroy(ctx, backend.Info{SandboxID: "0123456789abcdef"}); err == nil {
		t.Error("destroy through a redirect succeeded")
	}
	if n := trap.Conns(); n != 0 {
		t.Fatalf("the provisioner client followed a redirect: %d connections reached its target", n)
	}
}

// TestSandboxHostsValidate: only plain hosts (or *) are accepted.
func TestSandboxHostsValidate(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"node-1", "10.0.0.5", "[fd00::5]", "fd00::5", "*", "Node.Example."} {
		if err := (Config{URL: "http://p:8002", SandboxHosts: []string{h}}).Validate(); err != nil {
			t.Errorf("%q refused: %v", h, err)
		}
	}
	for _, h := range []string{"", "node:80", "http://node", "a/b", "169.254.169.254", "0.0.0.0", "224.0.0.1", "metadata.google.internal", "u@node"} {
		if err := (Config{URL: "http://p:8002", SandboxHosts: []string{h}}).Validate(); err == nil {
			t.Errorf("%q accepted", h)
		}
	}
}
