package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/events"
	"github.com/sandgate/sandgate/internal/statedb"
	"github.com/sandgate/sandgate/internal/testutil"
)

// statusKeys are the fleets' events keys (default prefix).
var statusKeys = statedb.NewKeys("", 0)

// publishProbe publishes an event on the fleet's bus as a replica would.
func publishProbe(t *testing.T, f *fleet, e events.Event) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: f.redis.Addr()})
	defer rdb.Close()
	bus, err := events.New(rdb, events.Config{Stream: statusKeys.Events(), Replica: "test"})
	if err != nil {
		t.Fatal(err)
	}
	bus.Publish(context.Background(), e)
}

// putThread provisions thread as key's user and returns the sandbox id.
func putThread(t *testing.T, base, key, thread string) (sid, capURL string) {
	t.Helper()
	a := putSandbox(base, key, thread)
	if a.err != nil || a.code != 200 {
		t.Fatalf("PUT %s: %d %s %v", thread, a.code, a.body, a.err)
	}
	var raw struct {
		SandboxID  string `json:"sandbox_id"`
		SandboxURL string `json:"sandbox_url"`
	}
	if err := json.Unmarshal([]byte(a.body), &raw); err != nil || raw.SandboxID == "" {
		t.Fatalf("PUT %s: %s", thread, a.body)
	}
	return raw.SandboxID, raw.SandboxURL
}

// browser starts headless Debian chromium (required under CI=true), with
// extra flags, and returns its tab's context.
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	testutil.Require(t, err == nil, "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.Headless,
		chromedp.DisableGPU, chromedp.Flag("no-proxy-server", true))
	opts = append(opts, extra...)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // chromium refuses its sandbox as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	// The first run starts the browser: no timeout on it (it would end the browser).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// inPage runs steps in the tab, each batch bounded.
func inPage(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// textOf returns the text of the first element matching the CSS selector.
func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// TestStatusPageInBrowser: an admin logs in to the status page in real
// Chromium; a sandbox created during the test shows up, the live event
// list gains entries (the pool's and one published by another process)
// without a reload, and a destroy by the operator CLI makes the row go.
func TestStatusPageInBrowser(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "ops="+sha("ops-key")+":threads+admin,alice="+sha("alice-key"))
	g := f.start()
	ctx := browser(t)

	inPage(t, ctx, "log in and open the page",
		chromedp.Navigate(g.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "ops-key"),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.ID("sandboxes")),
		chromedp.WaitVisible(chromedp.CSS(`body[data-live="on"]`)), // the event stream is open
	)
	// Gone after any reload: proves the updates below come live.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.sgMarker = "kept"`)); err != nil {
		t.Fatal(err)
	}

	sid, _ := putThread(t, g.URL, "alice-key", "browser-t")
	row := `tr[data-sandbox="` + sid + `"]`
	// The row may first show the create in progress; the ready event
	// refreshes it to active.
	inPage(t, ctx, "the new sandbox's row never appeared as active", chromedp.WaitVisible(chromedp.CSS(row+` td.state-active`)))
	cells := textOf(t, ctx, row)
	for _, want := range []string{"active", "process", "alice", "browser-t", sid} {
		if !strings.Contains(cells, want) {
			t.Errorf("row %q lacks %q", cells, want)
		}
	}

	// An event published by any replica reaches the open page.
	publishProbe(t, f, events.Event{Type: "probe", SandboxID: sid, User: "alice", Thread: "browser-t", Cause: "from the test"})
	inPage(t, ctx, "the live event list never showed the probe event", chromedp.WaitVisible(chromedp.CSS(`#events li.ev-probe`)))
	if probe := textOf(t, ctx, `#events li.ev-probe`); !strings.Contains(probe, sid) ||
		!strings.Contains(probe, "alice/browser-t") || !strings.Contains(probe, "from the test") {
		t.Errorf("probe event rendered as %q", probe)
	}
	inPage(t, ctx, "the pool's ready event never reached the page", chromedp.WaitVisible(chromedp.CSS(`#events li.ev-ready`)))

	// The operator destroys it with the CLI; the page follows live.
	runCLI(t, f.bin, g.URL, "ops-key", "sandboxes", "destroy", sid).must(t, 0, "sandboxes destroy")
	inPage(t, ctx, "the destroyed sandbox's row stayed", chromedp.WaitNotPresent(chromedp.CSS(row)))
	inPage(t, ctx, "the pool's destroyed event never reached the page", chromedp.WaitVisible(chromedp.CSS(`#events li.ev-destroyed`)))
	if marker, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.sgMarker || ""`)); err != nil || marker != "kept" {
		t.Fatalf("the page reloaded (marker %q, %v): updates must come live", marker, err)
	}
}

// TestStatusPageIsPerUser: plain HTTP, no browser. A plain user sees only
// its own sandboxes and events (page, fragment, stream), an admin sees
// all, the tables are in the HTML (no JavaScript needed), no capability
// is rendered, and the login cookie opens the status routes only.
func TestStatusPageIsPerUser(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "ops="+sha("ops-key")+":threads+admin,alice="+sha("alice-key")+",bob="+sha("bob-key"))
	g := f.start()
	aliceSID, aliceCap := putThread(t, g.URL, "alice-key", "a1")
	bobSID, _ := putThread(t, g.URL, "bob-key", "b1")
	publishProbe(t, f, events.Event{Type: events.Failed, SandboxID: bobSID, User: "bob", Thread: "b1", Cause: "bob's failure"})

	page := func(key, path string) string {
		t.Helper()
		code, body, hdr := call(t, "GET", g.URL+path, nil, "Authorization", "Bearer "+key)
		if code != 200 {
			t.Fatalf("%s as %s: %d %s", path, key, code, body)
		}
		if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || hdr.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: CSP %q, X-Frame-Options %q", path, csp, hdr.Get("X-Frame-Options"))
		}
		return string(body)
	}
	for _, path := range []string{"/", "/status/sandboxes"} {
		alice := page("alice-key", path)
		if !strings.Contains(alice, `data-sandbox="`+aliceSID+`"`) {
			t.Errorf("%s: alice does not see her sandbox in the HTML table", path)
		}
		if strings.Contains(alice, bobSID) || strings.Contains(alice, "bob") {
			t.Errorf("%s: alice sees bob's sandbox or events", path)
		}
		if cap := aliceCap[strings.LastIndex(aliceCap, "/")+1:]; strings.Contains(alice, cap) {
			t.Errorf("%s: the capability is rendered", path)
		}
		ops := page("ops-key", path)
		if !strings.Contains(ops, `data-sandbox="`+aliceSID+`"`) || !strings.Contains(ops, `data-sandbox="`+bobSID+`"`) {
			t.Errorf("%s: the admin does not see both sandboxes", path)
		}
		if !strings.Contains(ops, "bob&#39;s failure") {
			t.Errorf("%s: the admin does not see bob's failure among the recent errors", path)
		}
		// The replica beats at start: alive for both, named to the admin only.
		if !strings.Contains(ops, "Replicas alive: 1") || !strings.Contains(ops, `id="replicas"`) ||
			!strings.Contains(alice, "Replicas alive: 1") || strings.Contains(alice, `id="replicas"`) {
			t.Errorf("%s: replicas alive not shown as 1 to both, or listed to alice", path)
		}
	}

	// Alice's stream carries her events only: bob's, published first, never arrives.
	req, _ := http.NewRequest("GET", g.URL+"/status/events", nil)
	req.Header.Set("Authorization", "Bearer alice-key")
	resp, err := g.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := bufio.NewReader(resp.Body)
	if l, err := lines.ReadString('\n'); err != nil || !strings.HasPrefix(l, ":") { // open: the watch is registered
		t.Fatalf("stream did not open: %q %v", l, err)
	}
	publishProbe(t, f, events.Event{Type: "probe", SandboxID: bobSID, User: "bob", Thread: "b1"})
	publishProbe(t, f, events.Event{Type: "probe", SandboxID: aliceSID, User: "alice", Thread: "a1"})
	got := make(chan string, 1)
	go func() {
		for {
			l, err := lines.ReadString('\n')
			if err != nil {
				close(got)
				return
			}
			if strings.HasPrefix(l, "data: ") {
				got <- l
				return
			}
		}
	}()
	select {
	case l := <-got:
		if !strings.Contains(l, aliceSID) || strings.Contains(l, bobSID) {
			t.Errorf("alice's first streamed event is %q, want hers", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("alice's stream carried nothing")
	}

	// The login cookie: HttpOnly, SameSite=Strict; it opens the page, not the API.
	if code, _, _ := call(t, "POST", g.URL+"/status/login", nil, "Content-Type", "application/x-www-form-urlencoded"); code != 401 {
		t.Errorf("login without a token: %d, want 401", code)
	}
	login, _ := http.NewRequest("POST", g.URL+"/status/login", strings.NewReader("token=alice-key"))
	login.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp2, err := noRedirect.Do(login)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	sc := resp2.Header.Get("Set-Cookie")
	if resp2.StatusCode != 303 || !strings.Contains(sc, "HttpOnly") || !strings.Contains(sc, "SameSite=Strict") {
		t.Fatalf("login: %d Set-Cookie %q", resp2.StatusCode, sc)
	}
	cookie := strings.SplitN(sc, ";", 2)[0]
	if code, body, _ := call(t, "GET", g.URL+"/status/sandboxes", nil, "Cookie", cookie); code != 200 || !strings.Contains(string(body), aliceSID) {
		t.Errorf("fragment with the cookie: %d", code)
	}
	if code, _, _ := call(t, "GET", g.URL+"/threads/a1/sandbox", nil, "Cookie", cookie); code != 401 {
		t.Errorf("the cookie opened the API: %d, want 401", code)
	}
}

// TestStatusPageActionsInBrowser: an admin, logged in to the status page in
// real Chromium, freezes one of alice's sandboxes and destroys another from
// the page (each link confirms inline and posts with the session's form
// token); the rows change state without a reload, the gateway agrees (the
// thread's record says frozen), the frozen sandbox's own page shows it
// frozen with its CPU and memory and thaws it in place, its checkpoint
// action checkpoints alice's thread, and the operator's destroy is not
// listed under "Recent errors".
func TestStatusPageActionsInBrowser(t *testing.T) {
	t.Parallel()
	f := newFleet(t, "--auth-api-keys", "ops="+sha("ops-key")+":threads+admin,alice="+sha("alice-key"),
		"--cache-ttl", "500ms", "--touch-interval", "200ms") // a freeze waits out the cached routes
	g := f.start()
	frozenSID, _ := putThread(t, g.URL, "alice-key", "to-freeze")
	goneSID, _ := putThread(t, g.URL, "alice-key", "to-destroy")
	ctx := browser(t)

	inPage(t, ctx, "log in and open the page",
		chromedp.Navigate(g.URL+"/status"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), "ops-key"),
		chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-sandbox="`+frozenSID+`"] td.state-active`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-live="on"]`)),
	)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.sgMarker = "kept"`)); err != nil {
		t.Fatal(err)
	}

	frozenRow := `tr[data-sandbox="` + frozenSID + `"]`
	inPage(t, ctx, "freeze from the page",
		chromedp.Click(chromedp.CSS(frozenRow+` a.act-freeze`)),
		chromedp.WaitVisible(chromedp.CSS(frozenRow+` .confirm button.yes`)),
		chromedp.Click(chromedp.CSS(frozenRow+` .confirm button.yes`)),
		chromedp.WaitVisible(chromedp.CSS(frozenRow+` td.state-frozen`)),
	)
	if flash := textOf(t, ctx, "#flash"); flash != "Sandbox frozen." {
		t.Errorf("after the freeze the page says %q", flash)
	}
	code, body, _ := call(t, "GET", g.URL+"/threads/to-freeze/sandbox", nil, "Authorization", "Bearer alice-key")
	if code != 200 || !strings.Contains(string(body), `"frozen":true`) {
		t.Fatalf("the gateway does not have the sandbox frozen: %d %s", code, body)
	}

	// The frozen sandbox's own page: its state, the backend's CPU and
	// memory sample; a thaw there runs it again, in place.
	inPage(t, ctx, "open the frozen sandbox's page",
		chromedp.Click(chromedp.CSS(frozenRow+` a[href="/status/sandboxes/`+frozenSID+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#sandbox td.state-frozen`)),
	)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.sgMarker = "kept"`)); err != nil {
		t.Fatal(err)
	}
	detail := textOf(t, ctx, "#sandbox")
	for _, re := range []string{`State\s+frozen for \d+s`, `Thread\s+to-freeze`, `Backend\s+process`,
		`CPU time\s+\d+\.\d\d s`, `Memory\s+\d+\.\d MiB`} {
		if !regexp.MustCompile(re).MatchString(detail) {
			t.Errorf("the sandbox's page lacks %s:\n%s", re, detail)
		}
	}
	inPage(t, ctx, "thaw from the sandbox's page",
		chromedp.Click(chromedp.CSS(`#live a.act-thaw`)),
		chromedp.Click(chromedp.CSS(`#live .confirm button.yes`)),
		chromedp.WaitVisible(chromedp.CSS(`#sandbox td.state-active`)),
	)
	if marker, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.sgMarker || ""`)); err != nil || marker != "kept" {
		t.Fatalf("the sandbox's page reloaded (marker %q, %v): the thaw must update in place", marker, err)
	}
	// The checkpoint action (here from a script with the admin's header: no
	// form token needed) checkpoints alice's thread, not the admin's.
	code, body, _ = call(t, "POST", g.URL+"/status/sandboxes/"+frozenSID+"/checkpoint", nil,
		"Authorization", "Bearer ops-key", "Accept", "application/json")
	if code != 200 || !strings.Contains(string(body), `"done":"checkpointed"`) {
		t.Fatalf("checkpoint action: %d %s", code, body)
	}
	code, body, _ = call(t, "GET", g.URL+"/threads/to-freeze/checkpoints", nil, "Authorization", "Bearer alice-key")
	var cps struct {
		Checkpoints []json.RawMessage `json:"checkpoints"`
	}
	if err := json.Unmarshal(body, &cps); code != 200 || err != nil || len(cps.Checkpoints) != 1 {
		t.Fatalf("alice's checkpoints after the page's checkpoint: %d %s", code, body)
	}

	inPage(t, ctx, "back to the list", chromedp.Navigate(g.URL+"/status"), chromedp.WaitVisible(chromedp.CSS(`body[data-live="on"]`)))
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.sgMarker = "kept"`)); err != nil {
		t.Fatal(err)
	}

	goneRow := `tr[data-sandbox="` + goneSID + `"]`
	inPage(t, ctx, "destroy from the page",
		chromedp.Click(chromedp.CSS(goneRow+` a.act-destroy`)),
		chromedp.WaitVisible(chromedp.CSS(goneRow+` .confirm button.yes`)),
		chromedp.Click(chromedp.CSS(goneRow+` .confirm button.yes`)),
		chromedp.WaitNotPresent(chromedp.CSS(goneRow)),
		chromedp.WaitVisible(chromedp.CSS(`#events li.ev-destroyed`)),
	)
	if marker, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.sgMarker || ""`)); err != nil || marker != "kept" {
		t.Fatalf("the page reloaded (marker %q, %v): actions must update in place", marker, err)
	}
	if code, _, _ := call(t, "GET", g.URL+"/threads/to-destroy/sandbox", nil, "Authorization", "Bearer alice-key"); code != 404 {
		t.Fatalf("the destroyed thread still has a sandbox: %d", code)
	}
	// The destroyed event is on the page: the operator's own destroy (reason
	// admin) must not be among the errors, in the page nor in the HTML.
	if errs := textOf(t, ctx, "#errors"); strings.Contains(errs, goneSID) || strings.Contains(errs, frozenSID) {
		t.Errorf("Recent errors list the operator's own actions: %q", errs)
	}
	_, frag, _ := call(t, "GET", g.URL+"/status/sandboxes", nil, "Authorization", "Bearer ops-key")
	errs := string(frag)[strings.Index(string(frag), `id="errors"`):]
	if strings.Contains(errs, goneSID) {
		t.Errorf("the fragment's Recent errors list the operator's destroy: %s", errs)
	}
}
