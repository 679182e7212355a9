package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestPreviewInBrowser: in real Chromium, with a gateway session cookie
// (the status page's login), a preview link's page (host form, its own
// origin) runs its script, which opens a WebSocket back to the sandbox and
// shows the echo; the sandbox-side server logged every request it got, and
// none carried the gateway's cookie. Chromium resolves the preview names to
// 127.0.0.1 (--host-resolver-rules), as wildcard DNS would.
func TestPreviewInBrowser(t *testing.T) {
	t.Parallel()
	wsecho := buildTestdata(t, "wsecho")
	f := newFleet(t, "--auth-api-keys", "ops="+sha("ops-key")+":threads+admin,alice="+sha("alice-key"),
		"--preview-suffix", previewSuffix)
	g := f.start()
	ctx := browser(t, chromedp.Flag("host-resolver-rules", "MAP *."+previewSuffix+" 127.0.0.1"))

	inPage(t, ctx, "log in to the status page",
		chromedp.Navigate(g.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "ops-key"),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.ID("sandboxes")),
	)

	const thread = "browser-preview"
	startWsecho(t, g, thread, wsecho)
	link := createPreview(t, g, thread, "alice", 3002, "1h")
	if !strings.Contains(link.URL, "."+previewSuffix+":") {
		t.Fatalf("link %q is not the host form", link.URL)
	}
	// wsecho may still be starting: the page is opened once it answers.
	if !eventually(10*time.Second, func() bool { code, _, _ := previewGet(t, g, link, true, "/"); return code == 200 }) {
		t.Fatal("wsecho's page never answered through the link")
	}
	inPage(t, ctx, "open the link", chromedp.Navigate(link.URL), chromedp.WaitVisible(chromedp.ID("got")))
	got := textOf(t, ctx, "#got")
	for deadline := time.Now().Add(10 * time.Second); got == "waiting" && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		got = textOf(t, ctx, "#got")
	}
	if got != "echo: from the page" {
		t.Fatalf("the page's WebSocket showed %q, want the echo; the sandbox got:\n%s", got,
			shell(t, g.URL, thread, "cat wsecho.log", bearer("alice-key")...).Output)
	}

	// What reached the sandbox: the page and the socket, no gateway cookie.
	out := shell(t, g.URL, thread, "cat wsecho.log", bearer("alice-key")...).Output
	var page, socket bool
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var req struct {
			Path    string              `json:"path"`
			Headers map[string][]string `json:"headers"`
		}
		if err := json.Unmarshal([]byte(line), &req); err != nil {
			t.Fatalf("wsecho.log line %q: %v", line, err)
		}
		page = page || req.Path == "/"
		if req.Path == "/hmr" && len(req.Headers["Upgrade"]) > 0 {
			socket = true
			// The page's own origin, not the gateway's.
			if o := strings.Join(req.Headers["Origin"], ""); !strings.Contains(o, "."+previewSuffix+":") {
				t.Errorf("the socket's Origin %q is not the link's", o)
			}
		}
		for name, vals := range req.Headers {
			if v := strings.Join(vals, ";"); strings.Contains(v, "sandgate_status") || strings.Contains(v, "ops-key") {
				t.Errorf("the sandbox got the gateway's credential in %s: %s", name, v)
			}
		}
	}
	if !page || !socket {
		t.Errorf("wsecho.log holds the page %v and the socket %v, want both:\n%s", page, socket, out)
	}
}
