package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// fixedUpstream is an Upstream that is never dialled: the rewrite only
// reads its base URL.
type fixedUpstream struct {
	base *url.URL
	key  []string
}

func (u fixedUpstream) BaseURL() *url.URL               { return u.base }
func (u fixedUpstream) RoundTripper() http.RoundTripper { return http.DefaultTransport }
func (u fixedUpstream) SandboxKey() []string            { return u.key }
func (u fixedUpstream) PortHost() string                { return "" }
func (u fixedUpstream) Begin()                          {}
func (u fixedUpstream) End()                            {}

// BenchmarkRewrite measures the header rewrite of one proxied request, as
// ReverseProxy calls it: the outbound request arrives with hop-by-hop and
// X-Forwarded-* headers already removed. Each iteration first restores that
// outbound request in place (a struct copy and map writes, no allocation),
// so what allocates is the rewrite's own work.
func BenchmarkRewrite(b *testing.B) {
	for _, c := range []struct {
		name, base, key, secret string
		port                    string // a port inside the sandbox: its path goes under the bridge's prefix
		header                  map[string]string
		wantXFF                 string
		caller                  []string // the gateway's caller header value (ServeCSP)
	}{
		{name: "plain", base: "http://127.0.0.1:9000", wantXFF: "192.0.2.1"},
		{name: "credentials+chain+sandbox-key", base: "http://127.0.0.1:9000", key: "sandbox-secret",
			header:  map[string]string{"Authorization": "Bearer t", "X-Api-Key": "k", "X-Forwarded-For": "198.51.100.7"},
			wantXFF: "198.51.100.7, 192.0.2.1"},
		{name: "per-sandbox-secret", base: "http://127.0.0.1:9000", key: "shared", secret: "own-secret",
			header: map[string]string{sandboxspec.SecretHeader: "forged"}, wantXFF: "192.0.2.1"},
		{name: "behind-another-gateway", base: "http://127.0.0.1:9000/sandboxes/0123456789abcdef", wantXFF: "192.0.2.1"},
		{name: "port", base: "http://127.0.0.1:9000", port: "3000", wantXFF: "192.0.2.1"},
		{name: "caller", base: "http://127.0.0.1:9000", caller: []string{"alice"},
			header: map[string]string{sandboxspec.CallerHeader: "forged"}, wantXFF: "192.0.2.1"},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := New(Config{SandboxAPIKey: c.key}, nil, nil, nil)
			base, err := url.Parse(c.base)
			if err != nil {
				b.Fatal(err)
			}
			in := httptest.NewRequest(http.MethodGet, "http://gw.example/threads/t-1/v1/file/read?path=/mnt/user-data/x", nil)
			in.Header.Set("Accept", "application/json")
			in.Header.Set("User-Agent", "bench")
			for k, v := range c.header {
				in.Header.Set(k, v)
			}
			up := fixedUpstream{base: base}
			want := c.key
			if c.secret != "" {
				up.key, want = []string{c.secret}, c.secret
			}
			ctx := &state{Context: in.Context(), up: up, path: "/v1/file/read", port: c.port, caller: c.caller}
			in = in.WithContext(ctx)

			// What ReverseProxy hands to Rewrite: a clone without inbound X-Forwarded-*.
			sent := in.Header.Clone()
			for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
				delete(sent, h)
			}
			out := in.Clone(ctx)
			reset := func() {
				*out.URL = *in.URL
				out.Host = in.Host
				for k := range out.Header {
					if _, ok := sent[k]; !ok {
						delete(out.Header, k)
					}
				}
				for k, v := range sent {
					out.Header[k] = v
				}
			}
			pr := &httputil.ProxyRequest{In: in, Out: out}

			wantPath := base.Path + "/v1/file/read"
			if c.port != "" {
				wantPath = base.Path + sandboxspec.PortPath(c.port) + "/v1/file/read"
			}
			reset()
			p.rewrite(pr)
			if out.URL.Host != base.Host || out.URL.Path != wantPath || out.Header.Get("Authorization") != "" ||
				out.Header.Get("X-Api-Key") != "" || out.Header.Get("X-Forwarded-For") != c.wantXFF ||
				len(out.Header.Values(sandboxspec.SecretHeader)) > 1 || out.Header.Get(sandboxspec.SecretHeader) != want ||
				len(out.Header.Values(sandboxspec.CallerHeader)) != len(c.caller) ||
				c.caller != nil && out.Header.Get(sandboxspec.CallerHeader) != c.caller[0] {
				b.Fatalf("rewrite: url %s, headers %v", out.URL, out.Header)
			}

			b.ReportAllocs()
			for b.Loop() {
				reset()
				p.rewrite(pr)
			}
		})
	}
}
