package sandbox

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/backend"
)

const testSecret = "0123456789abcdef0123456789abcdef-own"

// TestSecretRequiredOnEveryRoute: with a secret configured, every route
// (known, unknown, WebSocket, any method) answers 401 JSON without it or
// with a wrong, truncated, extended or differently cased one; only the exact
// secret passes.
func TestSecretRequiredOnEveryRoute(t *testing.T) {
	t.Parallel()
	ts := newHostServerWith(t, Config{Secret: testSecret})
	routes := []struct{ method, path string }{
		{"GET", "/v1/sandbox"}, {"POST", "/v1/shell/exec"}, {"POST", "/v1/file/read"},
		{"POST", "/v1/file/write"}, {"GET", "/v1/file/download?path=/etc/passwd"},
		{"GET", "/v1/shell/ws"}, {"POST", "/v1/no-such"}, {"GET", "/"},
	}
	for _, bad := range []string{"", "wrong", testSecret[:len(testSecret)-1], testSecret + "x", strings.ToUpper(testSecret)} {
		for _, rt := range routes {
			h := http.Header{"Content-Type": {"application/json"}}
			if bad != "" {
				h.Set(backend.SecretHeader, bad)
			}
			r := ts.send(t, rt.method, rt.path, h, strings.NewReader(`{"command":"id","file":"/etc/passwd","content":"x"}`))
			if r.Status != http.StatusUnauthorized || r.Success || !strings.Contains(r.Message, backend.SecretHeader) {
				t.Fatalf("%s %s with %q: %d %s", rt.method, rt.path, bad, r.Status, r.Body)
			}
		}
	}
	h := http.Header{backend.SecretHeader: {testSecret}}
	if r := ts.send(t, "GET", "/v1/sandbox", h, nil); r.Status != http.StatusOK {
		t.Fatalf("with the secret: %d %s", r.Status, r.Body)
	}
}

// TestNoSecretStaysOpen: a server given no secret (unit tests, a server run
// by hand) serves without one.
func TestNoSecretStaysOpen(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	if r := ts.do(t, "GET", "/v1/sandbox", nil); r.Status != http.StatusOK {
		t.Fatalf("open server: %d %s", r.Status, r.Body)
	}
}

// TestSecretFileIsRemoved: the secret file is gone once read, whether or not
// its content was usable, and a missing file or a short secret is refused.
func TestSecretFileIsRemoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		name, content, wantErr string
	}{
		{"good", testSecret + "\n", ""},
		{"short", "short", "too short"},
		{"empty", "", "too short"},
	} {
		path := filepath.Join(dir, c.name)
		if err := os.WriteFile(path, []byte(c.content), 0o400); err != nil {
			t.Fatal(err)
		}
		got, err := readSecretFile(path)
		if c.wantErr == "" && (err != nil || got != testSecret) || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Fatalf("%s: got %q, %v", c.name, got, err)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("%s: secret file still there: %v", c.name, err)
		}
	}
	if _, err := readSecretFile(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing secret file was accepted")
	}
}

// TestSecretFlagsExclusive: one source only.
func TestSecretFlagsExclusive(t *testing.T) {
	t.Parallel()
	var cfg Config
	if err := loadSecret(&cfg, 5, "/run/sandgate/secret"); err == nil {
		t.Fatal("both --secret-fd and --secret-file were accepted")
	}
}
