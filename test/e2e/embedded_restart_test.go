package e2e

import (
	"encoding/json"
	"testing"
)

// TestEmbeddedRestartAdoptsAtOnce: a single gateway on the embedded Redis
// (no redis_url: its state dies with it) is stopped and started again on
// the same data dir, as Ctrl-C and a rerun on a laptop do. Its sandboxes
// outlive it; the new run must list and serve them from its first request,
// not after reconcile_grace (issue 40, point 11: none for a minute).
func TestEmbeddedRestartAdoptsAtOnce(t *testing.T) {
	t.Parallel()
	f := newFleetOn(t, "") // --redis-url "": the embedded server
	g := f.start()
	sid := create(t, g.URL, "", "t1")
	if code, body, _ := call(t, "POST", g.URL+"/threads/t1/v1/shell/exec", map[string]string{"command": "echo kept > marker"}); code != 200 {
		t.Fatalf("exec: %d %s", code, body)
	}
	g.stop()
	if live := f.sandboxes(); len(live) != 1 || live[0].SandboxID != sid {
		t.Fatalf("the sandbox did not outlive its gateway: %+v", live)
	}

	g = f.start() // the reconcile grace (1m) and interval (30s) are the defaults
	// At once: the admin list (no auth: the local user is an admin) has it...
	code, body, _ := call(t, "GET", g.URL+"/admin/v1/sandboxes", nil)
	var list struct {
		Sandboxes []struct {
			SandboxID string `json:"sandbox_id"`
			Thread    string `json:"thread"`
		} `json:"sandboxes"`
	}
	if code != 200 || json.Unmarshal(body, &list) != nil || len(list.Sandboxes) != 1 || list.Sandboxes[0].SandboxID != sid ||
		list.Sandboxes[0].Thread != "t1" {
		t.Fatalf("right after the restart the gateway lists %d %s, want %s", code, body, sid)
	}
	// ...and the thread gets the same sandbox back, not a new one.
	code, body, _ = call(t, "PUT", g.URL+"/threads/t1/sandbox", nil)
	var v sandboxView
	if code != 200 || json.Unmarshal(body, &v) != nil || v.SandboxID != sid || v.Outcome == "cold" {
		t.Fatalf("PUT after the restart: %d %s, want %s reclaimed", code, body, sid)
	}
	if live := f.sandboxes(); len(live) != 1 {
		t.Fatalf("%d sandboxes run after the restart, want the one: %+v", len(live), live)
	}
}
