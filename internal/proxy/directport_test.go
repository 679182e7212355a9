package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// TestDirectPorts: an upstream whose ports are dialled directly
// (PortHost: an image without Sandgate's server) gets a port request on
// its own address, path as sent, without the sandbox secret or the caller
// (the app on a port is not the sandbox server), over one shared
// incarnation pool that never hands a connection to the API, or to
// another port, to this port. A closed port is a PortError naming it,
// refused at once and never re-resolved.
func TestDirectPorts(t *testing.T) {
	t.Parallel()
	type seen struct{ host, path, key, caller string }
	got := make(chan seen, 8)
	serve := func(name string) *upstream {
		return newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got <- seen{r.Host, r.URL.RequestURI(), r.Header.Get(sandboxspec.SecretHeader), r.Header.Get(sandboxspec.CallerHeader)}
			io.WriteString(w, name)
		}))
	}
	api, app, other := serve("api"), serve("app"), serve("other")
	portOf := func(u *upstream) string { return strings.TrimPrefix(u.URL, "http://127.0.0.1:") }
	tg := newTarget(t, api.URL)
	tg.key, tg.portHost = []string{"incarnation-secret"}, "127.0.0.1"
	res := &fixedResolver{next: tg}
	var lastErr error
	p := New(Config{}, res, func(w http.ResponseWriter, r *http.Request, err error) {
		lastErr = err
		errWriter(w, r, err)
	}, nil)
	caller := []string{"alice"}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		port := r.URL.Query().Get("port")
		p.ServeCSP(w, r, tg, r.URL.Path, r.URL.RawPath, port, nil, caller)
	}))
	t.Cleanup(gw.Close)
	get := func(port string) (int, string) {
		t.Helper()
		q := url.Values{}
		if port != "" {
			q.Set("port", port)
		}
		resp, err := gw.Client().Get(gw.URL + "/page?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// Interleaved, so each would find the others' idle connections on top
	// of the stack.
	for range 2 {
		for _, tc := range []struct{ port, want string }{{"", "api"}, {portOf(app), "app"}, {portOf(other), "other"}} {
			if code, body := get(tc.port); code != 200 || body != tc.want {
				t.Fatalf("port %q: %d %q, want %s", tc.port, code, body, tc.want)
			}
			s := <-got
			wantKey, wantCaller := "", ""
			if tc.port == "" {
				wantKey, wantCaller = "incarnation-secret", "alice"
			}
			if s.key != wantKey || s.caller != wantCaller || !strings.HasPrefix(s.path, "/page") {
				t.Errorf("port %q received %+v; want key %q, caller %q, the path as sent", tc.port, s, wantKey, wantCaller)
			}
			if tc.port != "" && s.host != "127.0.0.1:"+tc.port {
				t.Errorf("port %s: Host %q", tc.port, s.host)
			}
		}
	}
	for _, u := range []*upstream{api, app, other} {
		if n := u.conns.Load(); n != 1 {
			t.Errorf("%s: %d connections, want 1 kept alive", u.URL, n)
		}
	}

	// A port nobody listens on: refused, named, not re-resolved.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	if code, _ := get(closed); code != http.StatusInternalServerError {
		t.Fatalf("closed port: %d", code)
	}
	var pe *PortError
	if !errors.As(lastErr, &pe) || pe.Port != closed || !errors.Is(lastErr, syscall.ECONNREFUSED) || res.calls.Load() != 0 {
		t.Errorf("closed port: %v (%d re-resolves), want a PortError for %s, refused, none", lastErr, res.calls.Load(), closed)
	}
}
