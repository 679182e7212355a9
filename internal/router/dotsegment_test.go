package router

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/identity"
)

func TestHasDotSegment(t *testing.T) {
	t.Parallel()
	cases := []struct {
		raw string // as sent on the request line
		dot bool
	}{
		{"/threads/x/v1/shell/exec", false},
		{"/threads/x/v1/file/app.js", false},
		{"/threads/x/v1/a..b/...", false},
		{"/threads/x/v1/.hidden", false},
		{"/threads/x/v1/file%20name", false},
		{"/threads/x/v1/../../sandboxes/0123456789abcdef/v1/shell/exec", true},
		{"/threads/x/v1/./shell/exec", true},
		{"/threads/x/v1/..", true},
		{"/threads/x/v1/%2e%2e/%2e%2e/sandboxes/0123456789abcdef/v1/x", true},
		{"/threads/x/v1/%2E%2e/%2e%2E/sandboxes/0123456789abcdef/v1/x", true},
		{"/threads/x/v1/.%2e/x", true},
		{"/threads/x/v1/..%2f..%2fsandboxes%2f0123456789abcdef/v1/x", true},
		{"/threads/x/v1/%2e%2e%2f%2e%2e%2fsandboxes/x", true},
		{"/threads/x/v1/..%5c..%5csandboxes/x", true},
		{"/threads/x/v1/..\\..\\sandboxes/x", true},
		{"/threads/x/v1/%252e%252e/%252e%252e/sandboxes/x", true},
		{"/threads/x/v1/%25252e%25252e/x", true},
		{"/threads/x/v1/%2525252e%2525252e/x", true},
		{"/threads/x/v1/..%252f..%252fsandboxes/x", true},
		{"/threads/x/v1/a%252541", false},        // two layers, no dots
		{"/threads/x/v1/a%25252525252541", true}, // more layers than are looked through: refused
		{"/threads/x/v1/50%25off", true},         // a % that is no escape: a lenient proxy might decode it
	}
	for _, c := range cases {
		u, err := url.ParseRequestURI(c.raw)
		if err != nil {
			t.Fatalf("%s: %v", c.raw, err)
		}
		if got := hasDotSegment(u.Path); got != c.dot {
			t.Errorf("%s (decoded %q): dot segment = %v, want %v", c.raw, u.Path, got, c.dot)
		}
	}
}

func TestHasDotSegmentDoesNotAllocate(t *testing.T) {
	path := "/threads/thread-1/v1/file/read/static/app.min.js"
	if n := testing.AllocsPerRun(100, func() { hasDotSegment(path) }); n != 0 {
		t.Errorf("hasDotSegment allocates %.0f times on a plain path", n)
	}
}

// TestDotSegmentsRefusedOnEveryProxiedRoute sends each dot-segment form,
// byte for byte on the request line, to every proxied route family (thread,
// sandbox id, capability URL, host route) of a router in front of a real
// sandbox server that counts what reaches it: each is a JSON 400 and the
// sandbox sees none of them, while the same family's clean path does reach it.
func TestDotSegmentsRefusedOnEveryProxiedRoute(t *testing.T) {
	t.Parallel()
	sid := identity.SandboxID("default", "t1")
	var reached atomic.Int32
	route, _ := sandbox(t, "s", func(*testRoute) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			_, _ = io.WriteString(w, "ok")
		}
	})
	gw := httptest.NewServer(New(Deps{Pool: &fakePool{route: route}, Aliases: stubPool{}, HostSuffix: "sbx.test",
		Log: slog.New(slog.DiscardHandler)}))
	t.Cleanup(gw.Close)

	families := []struct{ name, prefix, host string }{
		{"thread", "/threads/t1/v1/", ""},
		{"sandbox id", "/sandboxes/" + sid + "/v1/", ""},
		{"capability", "/c/" + testCapability + "/v1/", ""},
		{"host route", "/", sid + ".sbx.test"},
		{"host route with a port", "/", "8080-" + sid + ".sbx.test"},
	}
	other := "0123456789abcdef"
	tails := []string{
		"../../sandboxes/" + other + "/v1/shell/exec",
		"./shell/exec",
		"shell/..",
		"%2e%2e/%2e%2e/sandboxes/" + other + "/v1/shell/exec",
		"%2E%2e/%2e%2E/sandboxes/" + other + "/v1/shell/exec",
		"%2E./%2e./sandboxes/" + other + "/v1/shell/exec",
		".%2e/x",
		"%2e/shell/exec",
		"..%2f..%2fsandboxes%2f" + other + "%2fv1%2fshell%2fexec",
		"%2e%2e%2F%2e%2e%2Fsandboxes/" + other + "/v1/shell/exec",
		"..%5c..%5csandboxes/" + other + "/v1/shell/exec",
		`..\..\sandboxes/` + other + "/v1/shell/exec",
		"%252e%252e/%252e%252e/sandboxes/" + other + "/v1/shell/exec",
		"..%252f..%252fsandboxes/" + other + "/v1/shell/exec",
		"%25252e%25252e/x",
	}
	for _, f := range families {
		host := f.host
		if host == "" {
			host = gw.Listener.Addr().String()
		}
		clean := f.prefix + "v1/sandbox"
		if f.host == "" {
			clean = f.prefix + "sandbox"
		}
		before := reached.Load()
		if code, body := rawGet(t, gw.Listener.Addr().String(), host, clean); code != 200 || reached.Load() != before+1 {
			t.Fatalf("%s: clean %s: %d %s (reached %d), want it proxied", f.name, clean, code, body, reached.Load()-before)
		}
		for _, tail := range tails {
			p := f.prefix + tail
			before := reached.Load()
			code, body := rawGet(t, gw.Listener.Addr().String(), host, p)
			if code != 400 || !strings.Contains(body, `"bad_request"`) || !strings.Contains(body, "segments") {
				t.Errorf("%s: %s: %d %s, want the JSON 400 for dot segments", f.name, p, code, body)
			}
			if n := reached.Load() - before; n != 0 {
				t.Errorf("%s: %s reached the sandbox %d times", f.name, p, n)
			}
		}
	}
}

// rawGet sends GET target with Host host to addr, the request line exactly
// as given (no client-side cleaning or re-encoding), and reads the answer.
func rawGet(t *testing.T, addr, host, target string) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, host); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
