package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// TestSandboxKeyPerUpstream: a sandbox with a secret of its own gets that
// secret and never the shared key; one without gets the shared key; a
// client's forged copies (several values included) never reach either, and
// no answer carries a key back.
func TestSandboxKeyPerUpstream(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, shared, own, want string
	}{
		{name: "own secret beats the shared key", shared: "shared-key", own: "own-secret", want: "own-secret"},
		{name: "own secret without a shared key", own: "own-secret", want: "own-secret"},
		{name: "no secret: the shared key", shared: "shared-key", want: "shared-key"},
		{name: "neither: no header", want: ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			seen := make(chan []string, 1)
			up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen <- r.Header.Values(sandboxspec.SecretHeader)
				w.Header().Set(sandboxspec.SecretHeader, "echoed")
			}))
			tg := newTarget(t, up.URL)
			if c.own != "" {
				tg.key = []string{c.own}
			}
			p := New(Config{SandboxAPIKey: c.shared}, &fixedResolver{}, errWriter, nil)
			gw := gatewayFor(t, p, func() Upstream { return tg })
			for range 2 { // the shared header value survives reuse unchanged
				req, _ := http.NewRequest("GET", gw.URL+"/v1/sandbox", nil)
				req.Header.Add(sandboxspec.SecretHeader, "forged-1")
				req.Header.Add(sandboxspec.SecretHeader, "forged-2")
				resp, err := gw.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				got := <-seen
				if c.want == "" && len(got) != 0 || c.want != "" && (len(got) != 1 || got[0] != c.want) {
					t.Fatalf("sandbox saw %s = %q, want %q", sandboxspec.SecretHeader, got, c.want)
				}
				if v := resp.Header.Get(sandboxspec.SecretHeader); v != "" {
					t.Fatalf("client saw %s = %q", sandboxspec.SecretHeader, v)
				}
			}
			if c.own != "" && tg.key[0] != c.own {
				t.Fatalf("the route's shared header value was modified: %q", tg.key)
			}
		})
	}
}

// TestRetryCarriesTheReplacementsKey: after a dial failure the request goes
// to the replacement incarnation with the replacement's secret, not the dead
// one's (each incarnation has its own).
func TestRetryCarriesTheReplacementsKey(t *testing.T) {
	t.Parallel()
	seen := make(chan []string, 1)
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Values(sandboxspec.SecretHeader)
	}))
	fresh := newTarget(t, up.URL)
	fresh.key = []string{"new-incarnation-secret"}
	dead := newTarget(t, "http://127.0.0.1:1")
	dead.key = []string{"dead-incarnation-secret"}
	res := &fixedResolver{next: fresh}
	p := New(Config{SandboxAPIKey: "shared"}, res, errWriter, nil)
	gw := gatewayFor(t, p, func() Upstream { return dead })
	resp, err := gw.Client().Post(gw.URL+"/v1/file/write", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || res.calls.Load() != 1 {
		t.Fatalf("status %d after %d retries", resp.StatusCode, res.calls.Load())
	}
	if got := <-seen; len(got) != 1 || got[0] != "new-incarnation-secret" {
		t.Fatalf("the replacement saw %s = %q", sandboxspec.SecretHeader, got)
	}
}

// TestCallerHeaderIsTheGatewaysOnly: the caller a sandbox records in its
// command log is the one the gateway names; a client's forged copies
// (several values included) are replaced, or removed when the gateway
// names none (a preview's port request).
func TestCallerHeaderIsTheGatewaysOnly(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		caller []string
	}{
		{"the gateway names alice", []string{"alice"}},
		{"the gateway names none", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			seen := make(chan []string, 1)
			up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen <- r.Header.Values(sandboxspec.CallerHeader)
			}))
			tg := newTarget(t, up.URL)
			p := New(Config{}, &fixedResolver{}, errWriter, nil)
			gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				p.ServeCSP(w, r, tg, r.URL.Path, r.URL.RawPath, "", nil, c.caller)
			}))
			t.Cleanup(gw.Close)
			for range 2 { // the shared value survives reuse unchanged
				req, _ := http.NewRequest("POST", gw.URL+"/v1/shell/exec", strings.NewReader(`{}`))
				req.Header.Add(sandboxspec.CallerHeader, "admin")
				req.Header.Add(strings.ToLower(sandboxspec.CallerHeader), "root")
				resp, err := gw.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if got := <-seen; len(got) != len(c.caller) || len(got) == 1 && got[0] != c.caller[0] {
					t.Fatalf("sandbox saw %s = %q, want %q", sandboxspec.CallerHeader, got, c.caller)
				}
			}
			if c.caller != nil && c.caller[0] != "alice" {
				t.Fatalf("the shared caller value was modified: %q", c.caller)
			}
		})
	}
}
