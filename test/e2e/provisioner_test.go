package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestProvisionerContractAsDeerFlowDrivesIt calls the provisioner API the way
// DeerFlow's RemoteSandboxBackend does (same requests, same checks on the
// answers), then uses the returned sandbox_url the way AioSandbox does.
func TestProvisionerContractAsDeerFlowDrivesIt(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	g := f.start()
	api := g.URL + "/api"
	key := []string{"X-API-Key", "deerflow-key"}

	if code, body, _ := call(t, "GET", g.URL+"/health", nil); code != 200 || !strings.Contains(string(body), `"ok"`) {
		t.Fatalf("health: %d %s", code, body)
	}
	// probe_capabilities
	code, body, _ := call(t, "GET", api+"/capabilities", nil, key...)
	var caps struct {
		Version int `json:"mount_contract_version"`
	}
	if code != 200 || json.Unmarshal(body, &caps) != nil || caps.Version != 2 {
		t.Fatalf("capabilities: %d %s", code, body)
	}
	// create, as _provisioner_create sends it (DeerFlow's own 8-char id).
	payload := map[string]any{
		"sandbox_id": "3f9a1c2b", "thread_id": "thread-1", "user_id": "default",
		"required_mount_contract_version": 2, "include_legacy_skills": true,
		"provision_lark_cli_runtime": false, "provision_lark_cli_broker": false,
	}
	type sandbox struct {
		SandboxID string `json:"sandbox_id"`
		URL       string `json:"sandbox_url"`
		Status    string `json:"status"`
		User      string `json:"user_id"`
		Thread    string `json:"thread_id"`
		Version   *int   `json:"mount_contract_version"`
	}
	create := func() sandbox {
		code, body, _ := call(t, "POST", api+"/sandboxes", payload, key...)
		var s sandbox
		if code != 200 || json.Unmarshal(body, &s) != nil {
			t.Fatalf("create: %d %s", code, body)
		}
		// DeerFlow rejects a response whose identity differs from the request.
		if s.SandboxID != "3f9a1c2b" || s.User != "default" || s.Thread != "thread-1" || s.Version == nil || *s.Version != 2 {
			t.Fatalf("create response identity: %s", body)
		}
		return s
	}
	s1 := create()
	s2 := create() // idempotent
	if s1.URL != s2.URL || s1.Status != "Running" || !strings.HasPrefix(s1.URL, g.URL+"/c/") {
		t.Fatalf("create twice: %+v %+v", s1, s2)
	}
	if n := len(f.sandboxes()); n != 1 {
		t.Fatalf("%d sandboxes after two creates", n)
	}
	// discover / is_alive
	code, body, _ = call(t, "GET", api+"/sandboxes/3f9a1c2b", nil, key...)
	var d sandbox
	if code != 200 || json.Unmarshal(body, &d) != nil || d.Status != "Running" || d.URL != s1.URL || d.Version == nil || *d.Version != 2 {
		t.Fatalf("discover: %d %s", code, body)
	}
	// AioSandbox talks to sandbox_url directly.
	code, body, _ = call(t, "POST", s1.URL+"/v1/shell/exec", map[string]any{"command": "echo via-provisioner"})
	if code != 200 || !strings.Contains(string(body), "via-provisioner") {
		t.Fatalf("exec through sandbox_url: %d %s", code, body)
	}
	// list_running
	code, body, _ = call(t, "GET", api+"/sandboxes", nil, key...)
	var list struct {
		Sandboxes []sandbox `json:"sandboxes"`
		Count     int       `json:"count"`
	}
	if code != 200 || json.Unmarshal(body, &list) != nil || list.Count != 1 || list.Sandboxes[0].SandboxID != "3f9a1c2b" {
		t.Fatalf("list: %d %s", code, body)
	}
	// A client expecting another contract version gets DeerFlow's 409.
	payload["required_mount_contract_version"] = 1
	code, body, _ = call(t, "POST", api+"/sandboxes", payload, key...)
	if code != 409 || !strings.Contains(string(body), `"mount_contract_changed"`) || !strings.Contains(string(body), `"actual":2`) {
		t.Fatalf("contract mismatch: %d %s", code, body)
	}
	// destroy, then the id is unknown.
	if code, _, _ := call(t, "DELETE", api+"/sandboxes/3f9a1c2b", nil, key...); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if n := len(f.sandboxes()); n != 0 {
		t.Fatalf("%d sandboxes after delete", n)
	}
	if code, _, _ := call(t, "GET", api+"/sandboxes/3f9a1c2b", nil, key...); code != 404 {
		t.Fatalf("discover after delete: %d", code)
	}
	if code, _, _ := call(t, "DELETE", api+"/sandboxes/never-existed", nil, key...); code != 200 {
		t.Fatalf("delete unknown: %d", code)
	}
	if code, _, _ := call(t, "GET", api+"/sandboxes/never-existed", nil, key...); code != 404 {
		t.Fatalf("get unknown: %d", code)
	}
	if code, body, _ := call(t, "POST", api+"/sandboxes", map[string]any{"sandbox_id": "x/y", "thread_id": "t"}, key...); code != 400 {
		t.Fatalf("bad id: %d %s", code, body)
	}
	if code, _, _ := call(t, "POST", api+"/sandboxes", "not an object", key...); code != 400 {
		t.Fatalf("bad body: %d", code)
	}
}
