package proxy

import (
	"fmt"
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

// TestSecureHeadersSurviveInformationalResponses: the gateway's headers
// go into the client's response headers, which ReverseProxy clears after
// relaying a 1xx (the standard transport, transport_impl: net/http, relays
// them; Sandgate's skips them); a sandbox that sends 103 Early Hints first
// (carrying its own X-Content-Type-Options) still gets a final response
// with the gateway's headers, and only those.
func TestSecureHeadersSurviveInformationalResponses(t *testing.T) {
	t.Parallel()
	for _, standard := range []bool{false, true} {
		t.Run(fmt.Sprintf("standard=%v", standard), func(t *testing.T) {
			t.Parallel()
			secureHeadersAfter1xx(t, standard)
		})
	}
}

func secureHeadersAfter1xx(t *testing.T, standard bool) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Link", "</app.js>; rel=preload")
		h.Set("X-Content-Type-Options", "sniff-me")
		w.WriteHeader(http.StatusEarlyHints)
		h.Set("Content-Type", "text/html")
		h.Set("Referrer-Policy", "unsafe-url")
		_, _ = w.Write([]byte("<script>alert(1)</script>"))
	}))
	p := New(Config{}, &fixedResolver{}, errWriter, nil)
	tg := newTarget(t, up.URL)
	tg.rt = NewTransport(TransportConfig{Standard: standard})
	t.Cleanup(tg.rt.CloseIdleConnections)
	gw := gatewayFor(t, p, func() Upstream { return tg })
	resp, err := gw.Client().Get(gw.URL + "/v1/page")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for name, want := range map[string][]string{"X-Content-Type-Options": {"nosniff"},
		"Referrer-Policy": {"no-referrer"}, "Content-Security-Policy": {"sandbox"}} {
		if v := resp.Header.Values(name); !slices.Equal(v, want) {
			t.Errorf("%s %q after a 103, want %q", name, v, want)
		}
	}
}

// BenchmarkSecureResponse: the response headers of a proxied page are
// secured with no allocation. Each iteration first restores the sandbox's
// headers in place (map writes of shared values, no allocation).
func BenchmarkSecureResponse(b *testing.B) {
	p := New(Config{}, nil, nil, nil)
	html, cookie := []string{"text/html; charset=utf-8"}, []string{"a=1"}
	client, sandbox := http.Header{}, http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		sandbox["Content-Type"], sandbox["Set-Cookie"] = html, cookie
		delete(client, headerCSP)
		p.secureResponse(client, sandbox, nil)
	}
	if client.Get("Content-Security-Policy") != "sandbox" || client.Get("X-Content-Type-Options") != "nosniff" ||
		sandbox.Get("Set-Cookie") != "" {
		b.Fatalf("headers not secured: client %v, sandbox %v", client, sandbox)
	}
}
