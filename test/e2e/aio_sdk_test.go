package e2e

import (
	"encoding/json"
	"strconv"
	"testing"
)

// TestAIOSDKMethodsThroughGateway drives the agent_sandbox SDK methods of
// issue 16 through the three data-plane routes of a real gateway (thread,
// sandbox id, capability URL), including an interactive program fed through
// write_to_process.
func TestAIOSDKMethodsThroughGateway(t *testing.T) {
	t.Parallel()
	g := newFleet(t).start()
	shell(t, g.URL, "sdk", "true")
	sid := sandboxOf(t, g.URL, "sdk").SandboxID
	code, raw, _ := call(t, "GET", g.URL+"/threads/sdk/sandbox", nil)
	var view struct {
		URL string `json:"sandbox_url"`
	}
	if code != 200 || json.Unmarshal(raw, &view) != nil || view.URL == "" {
		t.Fatalf("GET /threads/sdk/sandbox: %d %s", code, raw)
	}
	for i, base := range []string{g.URL + "/threads/sdk/v1", g.URL + "/sandboxes/" + sid + "/v1", view.URL + "/v1"} {
		post := func(path string, body any, v any) {
			t.Helper()
			code, raw, _ := call(t, "POST", base+path, body)
			data(t, path, code, raw, v)
		}
		var ignored map[string]any
		// shell: an interactive program driven through write_to_process
		post("/shell/sessions/create", map[string]any{"id": "repl"}, &ignored)
		var res execData
		post("/shell/exec", map[string]any{"id": "repl", "async_mode": true,
			"command": `while read -r line; do [ "$line" = quit ] && break; echo "echo:$line"; done; echo bye`}, &res)
		if res.Status != "running" {
			t.Fatalf("%s: async exec: %+v", base, res)
		}
		var st struct{ Status string }
		for _, line := range []string{"one", "two", "quit"} {
			post("/shell/write", map[string]any{"id": "repl", "input": line, "press_enter": true}, &st)
		}
		post("/shell/wait", map[string]any{"id": "repl", "seconds": 10}, &st)
		post("/shell/view", map[string]any{"id": "repl"}, &res)
		if st.Status != "completed" || res.Output != "echo:one\necho:two\nbye\n" {
			t.Fatalf("%s: interactive program: %s %q", base, st.Status, res.Output)
		}
		code, raw, _ := call(t, "GET", base+"/shell/sessions", nil)
		var sessions struct {
			Sessions map[string]json.RawMessage `json:"sessions"`
		}
		if data(t, "list_sessions", code, raw, &sessions); sessions.Sessions["repl"] == nil {
			t.Fatalf("%s: list_sessions: %s", base, raw)
		}
		code, raw, _ = call(t, "GET", base+"/shell/sessions/stats", nil)
		var stats struct {
			Total int `json:"total_sessions"`
		}
		if data(t, "get_session_stats", code, raw, &stats); stats.Total < 1 {
			t.Fatalf("%s: stats: %s", base, raw)
		}

		// bash: async exec polled through output, stdin through write
		var exec struct {
			SessionID string `json:"session_id"`
			CommandID string `json:"command_id"`
			Status    string `json:"status"`
		}
		post("/bash/sessions/create", map[string]any{"session_id": "poll"}, &ignored)
		post("/bash/exec", map[string]any{"session_id": "poll", "async_mode": true, "command": `read x; echo "got $x"`}, &exec)
		post("/bash/write", map[string]any{"session_id": "poll", "input": "input-line\n"}, &ignored)
		var out struct {
			Stdout  string `json:"stdout"`
			Command struct {
				Status string `json:"status"`
			} `json:"command"`
		}
		post("/bash/output", map[string]any{"session_id": "poll", "command_id": exec.CommandID, "wait": true, "wait_timeout": 10}, &out)
		if exec.Status != "running" || out.Stdout != "got input-line\n" {
			t.Fatalf("%s: bash polling: %+v %+v", base, exec, out)
		}
		post("/bash/sessions/poll/close", nil, &ignored)

		// file: the editor and search_in_file
		file := "/mnt/user-data/workspace/ed-" + strconv.Itoa(i) + ".txt"
		var ed struct{ Output string }
		post("/file/str_replace_editor", map[string]any{"command": "create", "path": file, "file_text": "a\nb\n"}, &ed)
		var found struct {
			LineNumbers []int `json:"line_numbers"`
		}
		post("/file/search", map[string]any{"file": file, "regex": "b"}, &found)
		if len(found.LineNumbers) != 1 || found.LineNumbers[0] != 2 {
			t.Fatalf("%s: search_in_file: %+v", base, found)
		}
		// code: a one-shot python run (the process backend runs on this host)
		var ran struct {
			Status string `json:"status"`
			Stdout string `json:"stdout"`
		}
		post("/code/execute", map[string]any{"language": "python", "code": "import os; print(os.getcwd())"}, &ran)
		if ran.Status != "ok" || ran.Stdout != "/mnt/user-data/workspace\n" {
			t.Fatalf("%s: execute_code: %+v", base, ran)
		}
		if code, raw, _ := call(t, "DELETE", base+"/shell/sessions", nil); code != 200 {
			t.Fatalf("%s: cleanup_all_sessions: %d %s", base, code, raw)
		}
	}
}
