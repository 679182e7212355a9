package proxy

import (
	"net/http"
	"slices"
	"testing"
)

// TestSandboxResponsesOnTheGatewaysOrigin: a hostile sandbox gets none of
// the client's cookies, cannot set one, and a document it serves is
// sandboxed by CSP; with forward_cookies they cross both ways, and the
// other headers stay.
func TestSandboxResponsesOnTheGatewaysOrigin(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name           string
		forwardCookies bool
		contentType    []string // the sandbox's; nil = none
		ownCSP         string
		wantCSP        []string
	}{
		{name: "html", contentType: []string{"text/html; charset=utf-8"}, wantCSP: []string{"sandbox"}},
		{name: "html, upper case", contentType: []string{"TEXT/HTML"}, wantCSP: []string{"sandbox"}},
		{name: "no content type: sniffed", wantCSP: []string{"sandbox"}},
		{name: "empty content type: sniffed", contentType: []string{""}, wantCSP: []string{"sandbox"}},
		{name: "svg runs script", contentType: []string{"image/svg+xml"}, wantCSP: []string{"sandbox"}},
		{name: "xhtml", contentType: []string{"application/xhtml+xml"}, wantCSP: []string{"sandbox"}},
		{name: "the sandbox's own policy stays, ours is added", contentType: []string{"text/html"},
			ownCSP: "default-src 'self'", wantCSP: []string{"default-src 'self'", "sandbox"}},
		{name: "json is no document", contentType: []string{"application/json"}},
		{name: "event stream is no document", contentType: []string{"text/event-stream"}},
		{name: "forward_cookies: cookies cross", forwardCookies: true, contentType: []string{"text/plain"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			seen := make(chan http.Header, 1)
			up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen <- r.Header.Clone()
				h := w.Header()
				h["Content-Type"] = c.contentType
				h.Add("Set-Cookie", "sg_session=planted; Path=/status")
				h.Add("Set-Cookie", "other=1")
				h.Set("Referrer-Policy", "unsafe-url")
				if c.ownCSP != "" {
					h.Set("Content-Security-Policy", c.ownCSP)
				}
				_, _ = w.Write([]byte("<script>alert(1)</script>"))
			}))
			p := New(Config{ForwardCookies: c.forwardCookies}, &fixedResolver{}, errWriter, nil)
			gw := gatewayFor(t, p, func() Upstream { return newTarget(t, up.URL) })
			for range 2 { // the shared header values survive reuse unchanged
				req, _ := http.NewRequest("GET", gw.URL+"/v1/page", nil)
				req.Header.Add("Cookie", "sg_session=admin-session")
				req.Header.Add("Cookie", "app=1")
				resp, err := gw.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				got := <-seen
				if cookies := got.Values("Cookie"); c.forwardCookies != (len(cookies) == 2) {
					t.Errorf("sandbox got Cookie %q (forward_cookies %v)", cookies, c.forwardCookies)
				}
				if set := resp.Header.Values("Set-Cookie"); c.forwardCookies != (len(set) == 2) {
					t.Errorf("client got Set-Cookie %q (forward_cookies %v)", set, c.forwardCookies)
				}
				if v := resp.Header.Values("X-Content-Type-Options"); !slices.Equal(v, []string{"nosniff"}) {
					t.Errorf("X-Content-Type-Options %q", v)
				}
				if v := resp.Header.Values("Referrer-Policy"); !slices.Equal(v, []string{"no-referrer"}) {
					t.Errorf("Referrer-Policy %q", v)
				}
				if v := resp.Header.Values("Content-Security-Policy"); !slices.Equal(v, c.wantCSP) && (len(v) > 0 || len(c.wantCSP) > 0) {
					t.Errorf("Content-Security-Policy %q, want %q", v, c.wantCSP)
				}
			}
			if !slices.Equal(cspSandbox, []string{"sandbox"}) || !slices.Equal(nosniff, []string{"nosniff"}) {
				t.Fatalf("a shared header value was modified: %q %q", cspSandbox, nosniff)
			}
		})
	}
}

// BenchmarkSecureResponse: the response headers of a proxied page are
// secured with no allocation. Each iteration first restores the sandbox's
// headers in place (map writes of shared values, no allocation).
func BenchmarkSecureResponse(b *testing.B) {
	p := New(Config{}, nil, nil, nil)
	html, cookie := []string{"text/html; charset=utf-8"}, []string{"a=1"}
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		h["Content-Type"], h["Set-Cookie"] = html, cookie
		delete(h, headerCSP)
		p.secureResponse(h, nil)
	}
	if h.Get("Content-Security-Policy") != "sandbox" || h.Get("Set-Cookie") != "" {
		b.Fatalf("headers not secured: %v", h)
	}
}
