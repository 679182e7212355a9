package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The DeerFlow breaks of issue 16, driven through a real gateway with the
// process backend: each request is the one DeerFlow (or the agent_sandbox
// SDK it uses) sends, each check what its client requires of the answer.

func data(t *testing.T, what string, code int, body []byte, v any) {
	t.Helper()
	var env envelope
	if code != 200 || json.Unmarshal(body, &env) != nil || json.Unmarshal(env.Data, v) != nil {
		t.Fatalf("%s: %d %s", what, code, body)
	}
}

// TestDeerFlowToolsThroughGateway: grep, glob, GET /v1/sandbox and bash/exec
// without a session, through /threads/{t}/v1.
func TestDeerFlowToolsThroughGateway(t *testing.T) {
	t.Parallel()
	g := newFleet(t).start()
	v1 := g.URL + "/threads/tools/v1"
	shell(t, g.URL, "tools", "mkdir -p src && printf 'alpha\\nbeta alpha\\n' > src/a.txt && echo beta > b.txt")

	code, body, _ := call(t, "POST", v1+"/file/grep", map[string]any{"path": "/mnt/user-data/workspace", "pattern": "alpha"})
	var grep struct {
		Path         *string `json:"path"`
		Pattern      *string `json:"pattern"`
		MatchCount   int     `json:"match_count"`
		FilesMatched *int    `json:"files_matched"`
	}
	data(t, "grep", code, body, &grep)
	if grep.Path == nil || grep.Pattern == nil || *grep.Pattern != "alpha" || grep.MatchCount != 2 || grep.FilesMatched == nil || *grep.FilesMatched != 1 {
		t.Fatalf("grep result lacks FileGrepResult fields: %s", body)
	}

	code, body, _ = call(t, "POST", v1+"/file/glob", map[string]any{"path": "/mnt/user-data/workspace", "pattern": "**/*.txt"})
	var glob struct {
		Pattern *string `json:"pattern"`
		Files   []struct {
			Path string `json:"path"`
			Name string `json:"name"`
		} `json:"files"`
	}
	data(t, "glob", code, body, &glob)
	if glob.Pattern == nil || len(glob.Files) != 2 || glob.Files[1].Name != "a.txt" {
		t.Fatalf("glob result lacks FileGlobResult fields: %s", body)
	}

	code, body, _ = call(t, "GET", v1+"/sandbox", nil)
	var top map[string]json.RawMessage
	if code != 200 || json.Unmarshal(body, &top) != nil || string(top["data"]) != "null" || top["home_dir"] == nil {
		t.Fatalf("GET /v1/sandbox: data must be null (string|null in AIO 1.9.4): %d %s", code, body)
	}

	// DeerFlow's env-bearing commands: a fresh session each, nothing shared.
	shell(t, g.URL, "tools", "cd /mnt/user-data/outputs && export AGENT_VAR=agent")
	code, body, _ = call(t, "POST", v1+"/bash/exec", map[string]any{
		"command": `pwd; echo "[$AGENT_VAR]"; export LEAKED="$TOKEN"; cd /tmp`, "env": map[string]string{"TOKEN": "tok-9d2e"}})
	var bash struct {
		SessionID string `json:"session_id"`
		Stdout    string `json:"stdout"`
	}
	data(t, "bash/exec", code, body, &bash)
	if bash.Stdout != "/mnt/user-data/workspace\n[]\n" {
		t.Fatalf("bash/exec without session_id inherited the default session: %q", bash.Stdout)
	}
	// Its session stays reusable (AIO BashExecRequest: "Reuse the same
	// session_id to continue the same bash session"), and keeps none of the
	// command's cd, export or env.
	code, body, _ = call(t, "POST", v1+"/bash/exec", map[string]any{"session_id": bash.SessionID, "command": `pwd; echo "[$LEAKED][$TOKEN]"`})
	data(t, "bash/exec reusing "+bash.SessionID, code, body, &bash)
	if bash.Stdout != "/mnt/user-data/workspace\n[][]\n" {
		t.Fatalf("the session-less call's session kept its state: %q", bash.Stdout)
	}
	if out := shell(t, g.URL, "tools", `pwd; echo "[$LEAKED][$TOKEN][$AGENT_VAR]"`).Output; out != "/mnt/user-data/outputs\n[][][agent]\n" {
		t.Fatalf("bash/exec left state in the default session: %q", out)
	}
	code, body, _ = call(t, "POST", v1+"/bash/exec", map[string]any{"command": `echo "[$LEAKED][$TOKEN]"`})
	data(t, "bash/exec", code, body, &bash)
	if bash.Stdout != "[][]\n" {
		t.Fatalf("a request-scoped variable reached a later call: %q", bash.Stdout)
	}
}

// TestProvisionerDeerFlowFidelity: capabilities keys, extra_mounts and the
// list, as DeerFlow's provider uses them.
func TestProvisionerDeerFlowFidelity(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	skills, acp, client := filepath.Join(root, "skills"), filepath.Join(root, "acp"), filepath.Join(root, "client-chosen-7c1f")
	for _, d := range []string{filepath.Join(skills, "custom"), acp, client} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for file, content := range map[string]string{
		filepath.Join(skills, "custom", "SKILL.md"): "operator skill\n",
		filepath.Join(acp, "result.txt"):            "acp result\n",
		filepath.Join(client, "stolen.txt"):         "client host file\n",
	} {
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := newFleet(t, "--skills-dir", skills, "--acp-workspace", acp)
	g := f.start()
	api := g.URL + "/api"

	code, body, _ := call(t, "GET", api+"/capabilities", nil)
	var caps map[string]any
	if code != 200 || json.Unmarshal(body, &caps) != nil || caps["lark_cli_init_image"] != false || caps["lark_cli_broker_image"] != false {
		t.Fatalf("capabilities lack DeerFlow's keys: %d %s", code, body)
	}

	code, body, _ = call(t, "POST", api+"/sandboxes", map[string]any{
		"sandbox_id": "a1b2c3d4", "thread_id": "df-thread", "user_id": "default", "required_mount_contract_version": 2,
		"extra_mounts": []map[string]any{
			{"host_path": client, "container_path": "/mnt/skills/custom", "read_only": true},
			{"host_path": client, "container_path": "/mnt/acp-workspace", "read_only": true},
			{"host_path": "/etc", "container_path": "/mnt/integrations/lark-cli/config", "read_only": false},
			{"host_path": client, "container_path": "/mnt/x/../../etc", "read_only": false},
		},
	})
	var created struct {
		URL    string `json:"sandbox_url"`
		Mounts []struct {
			ContainerPath string `json:"container_path"`
			Mounted       bool   `json:"mounted"`
			ReadOnly      bool   `json:"read_only"`
		} `json:"extra_mounts"`
	}
	if code != 200 || json.Unmarshal(body, &created) != nil || len(created.Mounts) != 4 {
		t.Fatalf("create with extra_mounts: %d %s", code, body)
	}
	for i, want := range []bool{true, true, false, false} {
		if m := created.Mounts[i]; m.Mounted != want || want && !m.ReadOnly {
			t.Fatalf("extra mount %s: mounted %v read_only %v, want mounted %v read-only", m.ContainerPath, m.Mounted, m.ReadOnly, want)
		}
	}
	if strings.Contains(string(body), client) {
		t.Fatalf("create answer echoes a host path: %s", body)
	}
	// The sandbox sees the operator's dirs, never the client's host path.
	code, body, _ = call(t, "POST", created.URL+"/v1/shell/exec", map[string]any{"command": "cat /mnt/skills/custom/SKILL.md /mnt/acp-workspace/result.txt; ls /mnt/skills/custom /mnt/acp-workspace; ls /mnt/integrations 2>&1; true"})
	var out execData
	data(t, "exec", code, body, &out)
	if !strings.Contains(out.Output, "operator skill") || !strings.Contains(out.Output, "acp result") || strings.Contains(out.Output, "stolen") {
		t.Fatalf("sandbox mounts: %q", out.Output)
	}
	code, body, _ = call(t, "POST", created.URL+"/v1/file/write", map[string]any{"file": "/mnt/acp-workspace/new.txt", "content": "x"})
	if code != 403 {
		t.Fatalf("write into the read-only ACP workspace: %d %s", code, body)
	}
	logs := g.logs.String()
	if !strings.Contains(logs, "provisioner extra mount ignored") || !strings.Contains(logs, "/mnt/integrations/lark-cli/config") {
		t.Fatalf("ignored mount not logged:\n%s", tail(logs, 20))
	}
	if strings.Contains(logs, client) {
		t.Fatalf("a client-chosen host path reached the log")
	}

	// A sandbox made through /threads is not the provisioner API's: DeerFlow
	// would destroy it as an orphan.
	shell(t, g.URL, "agent-thread", "true")
	code, body, _ = call(t, "GET", api+"/sandboxes", nil)
	var list struct {
		Sandboxes []struct {
			SandboxID string `json:"sandbox_id"`
		} `json:"sandboxes"`
		Count int `json:"count"`
	}
	if code != 200 || json.Unmarshal(body, &list) != nil || list.Count != 1 || list.Sandboxes[0].SandboxID != "a1b2c3d4" {
		t.Fatalf("list must hold only the provisioner's sandbox: %d %s", code, body)
	}
	if n := len(f.sandboxes()); n != 2 {
		t.Fatalf("%d sandboxes, want 2", n)
	}
}
