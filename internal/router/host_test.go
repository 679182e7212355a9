package router

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/sandboxspec"
)

const suffix = "sandbox.example.com"

func TestHostRoute(t *testing.T) {
	t.Parallel()
	sid := "0123456789abcdef"
	cases := []struct {
		host       string
		sid, port  string
		match, bad bool
	}{
		{host: sid + "." + suffix, sid: sid, match: true},
		{host: sid + "." + suffix + ":8443", sid: sid, match: true},
		{host: sid + "." + suffix + ".", sid: sid, match: true},
		{host: strings.ToUpper(sid) + ".SANDBOX.Example.com", sid: sid, match: true},
		{host: "6080-" + sid + "." + suffix, sid: sid, port: "6080", match: true},
		{host: "65535-" + sid + "." + suffix, sid: sid, port: "65535", match: true},
		{host: suffix},                     // the API's own name
		{host: suffix + ":8080"},           // ditto
		{host: "gateway.internal"},         // another name
		{host: "x" + suffix},               // not under the suffix
		{host: "[::1]:8080"},               // an address
		{host: "127.0.0.1:8080"},           // ditto
		{host: ""},                         // none
		{host: "." + suffix, match: false}, // empty label
		{host: "nothex." + suffix, match: true, bad: true},
		{host: "0123456789abcde." + suffix, match: true, bad: true},
		{host: "a." + sid + "." + suffix, match: true, bad: true},
		{host: "0-" + sid + "." + suffix, match: true, bad: true},
		{host: "65536-" + sid + "." + suffix, match: true, bad: true},
		{host: "080-" + sid + "." + suffix, match: true, bad: true},
		{host: "-" + sid + "." + suffix, match: true, bad: true},
		{host: "1-2-" + sid + "." + suffix, match: true, bad: true},
		{host: "+80-" + sid + "." + suffix, match: true, bad: true},
	}
	for _, c := range cases {
		sid, port, match, err := hostRoute(c.host, suffix)
		if match != c.match || (err != nil) != c.bad || (!c.bad && (sid != c.sid || port != c.port)) {
			t.Errorf("%q: sid %q port %q match %v err %v", c.host, sid, port, match, err)
		}
	}
}

func TestHostRouteDoesNotAllocate(t *testing.T) {
	host := "6080-0123456789abcdef." + suffix + ":443"
	allocs := testing.AllocsPerRun(1000, func() {
		if _, _, ok, err := hostRoute(host, suffix); !ok || err != nil {
			t.Fatal("no match")
		}
	})
	if allocs != 0 {
		t.Errorf("parsing a host allocates %.1f times", allocs)
	}
}

func TestNormalizeHostSuffix(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "", " .Sandbox.Example.COM. ": suffix, "localhost": "localhost"} {
		if got, err := NormalizeHostSuffix(in); err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"a..b", "http://x", "x:80", "a/b", "_x.com"} {
		if _, err := NormalizeHostSuffix(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestHostRoutedRequests(t *testing.T) {
	t.Parallel()
	down := stubPool{err: fmt.Errorf("%w: x", pool.ErrState)}
	srv := httptest.NewServer(New(Deps{Pool: down, Aliases: down, HostSuffix: suffix}))
	defer srv.Close()
	sid := identity.SandboxID("default", "t")
	for _, c := range []struct {
		host, path string
		hdr        []string
		status     int
	}{
		{sid + "." + suffix, "/", nil, 503},        // the whole sandbox: any path goes to it
		{sid + "." + suffix, "/healthz", nil, 503}, // even the gateway's own paths
		{"6080-" + sid + "." + suffix, "/websockify", nil, 503},
		{"bad." + suffix, "/", nil, 400},
		{"99999-" + sid + "." + suffix, "/", nil, 400},
		{suffix, "/healthz", nil, 200},                                               // the API under the bare suffix
		{"127.0.0.1", "/healthz", nil, 200},                                          // and under any other name
		{sid + "." + suffix, "/", []string{"Origin", "http://other." + suffix}, 403}, // another sandbox's page
		{sid + "." + suffix, "/", []string{"Origin", "http://" + sid + "." + suffix}, 503},
	} {
		req, _ := http.NewRequest("GET", srv.URL+c.path, nil)
		req.Host = c.host
		for i := 0; i+1 < len(c.hdr); i += 2 {
			req.Header.Set(c.hdr[i], c.hdr[i+1])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("Host %s %s: %d, want %d", c.host, c.path, resp.StatusCode, c.status)
		}
	}
}

// FuzzHostRoute: any Host header, through the parser and the whole router
// with host routing on: no panic, no 5xx but the pool's own 503, and a match
// only ever yields a valid sandbox id and port.
func FuzzHostRoute(f *testing.F) {
	for _, s := range []string{
		"0123456789abcdef." + suffix, "80-0123456789abcdef." + suffix + ":1", suffix, "x." + suffix,
		"[::1]:80", "-." + suffix, "0123456789ABCDEF." + strings.ToUpper(suffix) + ".", "\x00." + suffix,
	} {
		f.Add(s)
	}
	down := stubPool{err: pool.ErrNotFound}
	rt := New(Deps{Pool: down, Aliases: down, HostSuffix: suffix})
	f.Fuzz(func(t *testing.T, host string) {
		sid, port, match, err := hostRoute(host, suffix)
		if match && err == nil && (!identity.ValidSandboxID(sid) || port != "" && !sandboxspec.ValidPort(port)) {
			t.Fatalf("%q: sid %q port %q", host, sid, port)
		}
		if !match && (sid != "" || port != "" || err != nil) {
			t.Fatalf("%q: no match but %q %q %v", host, sid, port, err)
		}
		req := httptest.NewRequest("GET", "/v1/sandbox", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		rt.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("Host %q: %d %s", host, rec.Code, rec.Body.String())
		}
	})
}
