package sandbox

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

const testSecret = "0123456789abcdef0123456789abcdef-own"

// TestSecretRequiredOnEveryRoute: with a secret configured, every route the
// server registers (walked from Routes, so a new endpoint is covered without
// editing this test), plus unknown paths, answers 401 JSON without the secret
// or with a wrong, truncated, extended or differently cased one; only the
// exact secret passes. Each request is first shown to reach its own route's
// pattern, not the 404 fallback, so an exemption for one route cannot hide.
func TestSecretRequiredOnEveryRoute(t *testing.T) {
	t.Parallel()
	ts := newHostServerWith(t, Config{Secret: testSecret})
	type target struct{ method, path, pattern string }
	var targets []target
	for _, pattern := range ts.srv.Routes() {
		method, p, ok := strings.Cut(pattern, " ")
		if !ok {
			t.Fatalf("route %q has no method", pattern)
		}
		p = regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(p, "victim")
		if p == "/v1/file/download" {
			p += "?path=/etc/passwd"
		}
		req := httptest.NewRequest(method, p, nil)
		if _, got := ts.srv.mux.Handler(req); got != pattern {
			t.Fatalf("%s %s reaches %q, not its route %q", method, p, got, pattern)
		}
		targets = append(targets, target{method, p, pattern})
	}
	if len(targets) < 35 {
		t.Fatalf("Routes lists only %d routes", len(targets))
	}
	targets = append(targets, target{"POST", "/v1/no-such", "/"}, target{"GET", "/", "/"},
		target{"PUT", "/v1/bash/exec", "/"})
	body := `{"command":"id","file":"/etc/passwd","content":"x","id":"victim","session_id":"victim","language":"python","code":"print(1)"}`
	for _, bad := range []string{"", "wrong", testSecret[:len(testSecret)-1], testSecret + "x", strings.ToUpper(testSecret)} {
		for _, rt := range targets {
			h := http.Header{"Content-Type": {"application/json"}}
			if bad != "" {
				h.Set(sandboxspec.SecretHeader, bad)
			}
			r := ts.send(t, rt.method, rt.path, h, strings.NewReader(body))
			if r.Status != http.StatusUnauthorized || r.Success || !strings.Contains(r.Message, sandboxspec.SecretHeader) {
				t.Errorf("%s %s (route %q) with secret %q: %d %s", rt.method, rt.path, rt.pattern, bad, r.Status, r.Body)
			}
		}
	}
	h := http.Header{sandboxspec.SecretHeader: {testSecret}}
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

// TestReadSecretBounds: a secret is kept whole up to maxSecretLen (read one
// byte past it, so a longer one is refused, never cut to the limit), and one
// shorter than minSecretLen is refused; surrounding whitespace (a trailing
// newline from a file) is not part of it.
func TestReadSecretBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want, err string
	}{
		{"shortest", strings.Repeat("s", minSecretLen), strings.Repeat("s", minSecretLen), ""},
		{"too short", strings.Repeat("s", minSecretLen-1), "", "too short"},
		{"newline trimmed", strings.Repeat("s", minSecretLen) + "\n", strings.Repeat("s", minSecretLen), ""},
		{"longest", strings.Repeat("l", maxSecretLen), strings.Repeat("l", maxSecretLen), ""},
		{"one too long", strings.Repeat("l", maxSecretLen+1), "", "too long"},
		{"far too long", strings.Repeat("l", 3*maxSecretLen), "", "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := readSecret(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("readSecret: %d bytes, err %v, want an error saying %q", len(got), err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("readSecret: %d bytes, err %v, want the %d bytes whole", len(got), err, len(tc.want))
			}
		})
	}
}

// TestReadSecretFD reads the launcher's pipe, and refuses what readSecret
// refuses, naming the descriptor.
func TestReadSecretFD(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, err string }{{testSecret + "\n", ""}, {"short", "too short"}} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteString(tc.in); err != nil {
			t.Fatal(err)
		}
		w.Close()
		fd, err := syscall.Dup(int(r.Fd())) // readSecretFD closes what it reads, as the server does
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		got, err := readSecretFD(fd)
		switch {
		case tc.err == "" && (err != nil || got != testSecret):
			t.Fatalf("secret-fd: %q, %v; want the secret", got, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), "secret-fd") || !strings.Contains(err.Error(), tc.err)):
			t.Fatalf("secret-fd with %q: err %v, want one naming secret-fd and %q", tc.in, err, tc.err)
		}
	}
}
