package sandbox

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestWriteToProcess: an async command's stdin is a pipe the client writes
// through shell/write; `read` waits for the line instead of seeing EOF.
func TestWriteToProcess(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	okData[sessionResult](t, ts, "/v1/shell/sessions/create", map[string]any{"id": "tty"})
	started := okData[shellResult](t, ts, "/v1/shell/exec", map[string]any{"id": "tty", "async_mode": true,
		"command": `read name; echo "hello $name"; read n; echo "n=$n"`})
	if started.Status != statusRunning {
		t.Fatalf("async exec: %+v", started)
	}
	// Still waiting for input: a short wait times out with running.
	if st := okData[statusResult](t, ts, "/v1/shell/wait", map[string]any{"id": "tty", "seconds": 0.2}); st.Status != statusRunning {
		t.Fatalf("read saw EOF instead of waiting for input: %+v", st)
	}
	okData[statusResult](t, ts, "/v1/shell/write", map[string]any{"id": "tty", "input": "sandgate", "press_enter": true})
	okData[statusResult](t, ts, "/v1/shell/write", map[string]any{"id": "tty", "input": "42\n", "press_enter": false})
	if st := okData[statusResult](t, ts, "/v1/shell/wait", map[string]any{"id": "tty", "seconds": 10}); st.Status != statusCompleted {
		t.Fatalf("wait: %+v", st)
	}
	if v := okData[shellResult](t, ts, "/v1/shell/view", map[string]any{"id": "tty"}); v.Output != "hello sandgate\nn=42\n" {
		t.Fatalf("view: %q", v.Output)
	}
	// The command ended: more input is refused, not silently dropped.
	if r := ts.post(t, "/v1/shell/write", map[string]any{"id": "tty", "input": "x", "press_enter": true}); r.Status != http.StatusConflict {
		t.Fatalf("write after the end: %d %s", r.Status, r.Body)
	}
	// A synchronous command keeps reading /dev/null: it never hangs a call.
	if r := shellRun(t, ts, map[string]any{"command": `read x || echo eof`}); r.Output != "eof\n" {
		t.Fatalf("sync read: %q", r.Output)
	}
}

// TestBashSessionsAndPolling: bash sessions, async bash/exec polled through
// bash/output offsets, stdin through bash/write, bash/kill, close.
func TestBashSessionsAndPolling(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	type info struct {
		SessionID    string `json:"session_id"`
		Status       string `json:"status"`
		WorkingDir   string `json:"working_dir"`
		CommandCount int    `json:"command_count"`
	}
	created := okData[info](t, ts, "/v1/bash/sessions/create", map[string]any{"session_id": "b", "exec_dir": "/mnt/user-data/outputs"})
	if created.SessionID != "b" || created.Status != "ready" || created.WorkingDir != "/mnt/user-data/outputs" {
		t.Fatalf("create: %+v", created)
	}
	run := okData[bashResult](t, ts, "/v1/bash/exec", map[string]any{"session_id": "b", "async_mode": true,
		"command": `echo first; read x; echo "second $x"; echo oops >&2`})
	if run.Status != statusRunning {
		t.Fatalf("async bash/exec: %+v", run)
	}
	type output struct {
		Stdout       string `json:"stdout"`
		Stderr       string `json:"stderr"`
		Offset       int64  `json:"offset"`
		StderrOffset int64  `json:"stderr_offset"`
		Command      struct {
			CommandID string `json:"command_id"`
			Status    string `json:"status"`
			ExitCode  *int   `json:"exit_code"`
		} `json:"command"`
	}
	first := okData[output](t, ts, "/v1/bash/output", map[string]any{"session_id": "b", "wait": true, "wait_timeout": 10})
	if first.Stdout != "first\n" || first.Offset != 6 || first.Command.Status != statusRunning || first.Command.CommandID != run.CommandID {
		t.Fatalf("first poll: %+v", first)
	}
	okData[map[string]any](t, ts, "/v1/bash/write", map[string]any{"session_id": "b", "command_id": run.CommandID, "input": "line\n"})
	var rest output
	stdout, stderr := "", ""
	off, errOff := first.Offset, int64(0)
	for i := 0; rest.Command.Status != statusCompleted || stderr == ""; i++ {
		if i == 50 {
			t.Fatalf("no completion after 50 polls: stdout %q stderr %q", stdout, stderr)
		}
		rest = okData[output](t, ts, "/v1/bash/output", map[string]any{"session_id": "b", "offset": off,
			"stderr_offset": errOff, "wait": true, "wait_timeout": 10})
		stdout, stderr = stdout+rest.Stdout, stderr+rest.Stderr
		off, errOff = rest.Offset, rest.StderrOffset
		if rest.Command.Status != statusRunning && rest.Command.Status != statusCompleted {
			t.Fatalf("poll: %+v", rest)
		}
	}
	if stdout != "second line\n" || stderr != "oops\n" || rest.Command.ExitCode == nil || *rest.Command.ExitCode != 0 {
		t.Fatalf("polled stdout %q stderr %q, final %+v", stdout, stderr, rest)
	}

	// The session's shell, between two commands, may let a SIGINT pass (its
	// EXIT trap catches it), so the signal is sent once the shell waits for
	// a child that prints its marker and becomes the sleep: whichever of the
	// two gets the SIGINT dies of it, and the shell follows.
	okData[bashResult](t, ts, "/v1/bash/exec", map[string]any{"session_id": "b", "async_mode": true,
		"command": "sh -c 'echo ready; exec sleep 30'"})
	if ready := okData[output](t, ts, "/v1/bash/output", map[string]any{"session_id": "b", "wait": true, "wait_timeout": 10}); ready.Stdout != "ready\n" {
		t.Fatalf("no ready marker: %+v", ready)
	}
	okData[map[string]any](t, ts, "/v1/bash/kill", map[string]any{"session_id": "b", "signal": "SIGINT"})
	// A lost signal leaves the sleep its 30 s; a slow machine is given 25.
	sent := time.Now()
	eventually(t, 25*time.Second, "killed status", func() bool {
		return okData[output](t, ts, "/v1/bash/output", map[string]any{"session_id": "b"}).Command.Status == "killed"
	})
	t.Logf("killed status %v after the SIGINT", time.Since(sent).Round(time.Millisecond))

	var list []info
	if r := ts.do(t, http.MethodGet, "/v1/bash/sessions", nil); json.Unmarshal(r.Data, &list) != nil ||
		!slices.ContainsFunc(list, func(i info) bool { return i.SessionID == "b" && i.CommandCount == 2 }) {
		t.Fatalf("list: %s", r.Body)
	}
	if r := ts.post(t, "/v1/bash/sessions/b/close", nil); r.Status != http.StatusOK {
		t.Fatalf("close: %d %s", r.Status, r.Body)
	}
	if r := ts.post(t, "/v1/bash/output", map[string]any{"session_id": "b"}); r.Status != http.StatusNotFound {
		t.Fatalf("output after close: %d", r.Status)
	}
}

// TestShellSessionManagement: list_sessions, get_session_stats,
// cleanup_all_sessions.
func TestShellSessionManagement(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	for _, id := range []string{"one", "two"} {
		okData[sessionResult](t, ts, "/v1/shell/sessions/create", map[string]any{"id": id})
	}
	okData[shellResult](t, ts, "/v1/shell/exec", map[string]any{"id": "two", "command": "sleep 30", "async_mode": true})
	type sessions struct {
		Sessions map[string]struct {
			Status         string  `json:"status"`
			CurrentCommand *string `json:"current_command"`
		} `json:"sessions"`
	}
	get := func() sessions {
		var v sessions
		if r := ts.do(t, http.MethodGet, "/v1/shell/sessions", nil); r.Status != http.StatusOK || json.Unmarshal(r.Data, &v) != nil {
			t.Fatalf("list: %d %s", r.Status, r.Body)
		}
		return v
	}
	got := get().Sessions
	if len(got) != 2 || got["two"].CurrentCommand == nil || *got["two"].CurrentCommand != "sleep 30" || got["one"].CurrentCommand != nil {
		t.Fatalf("list: %+v", got)
	}
	type stats struct {
		Total  int `json:"total_sessions"`
		Active int `json:"active_sessions"`
		Max    int `json:"max_sessions"`
	}
	var st stats
	if r := ts.do(t, http.MethodGet, "/v1/shell/sessions/stats", nil); json.Unmarshal(r.Data, &st) != nil ||
		st.Total != 2 || st.Active != 2 || st.Max != maxSessions {
		t.Fatalf("stats: %s", r.Body)
	}
	if r := ts.do(t, http.MethodDelete, "/v1/shell/sessions", nil); r.Status != http.StatusOK {
		t.Fatalf("cleanup: %d %s", r.Status, r.Body)
	}
	if got := get().Sessions; len(got) != 0 {
		t.Fatalf("sessions after cleanup: %+v", got)
	}
	eventually(t, 5*time.Second, "cleanup kills running commands", func() bool {
		ts.srv.groups.mu.Lock()
		defer ts.srv.groups.mu.Unlock()
		return len(ts.srv.groups.m) == 0
	})
}

// TestStrReplaceEditor: the text-editor tool's commands in order, each
// checked against the file on disk.
func TestStrReplaceEditor(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	f := vWorkspace + "/notes.txt"
	type res struct {
		Output     string  `json:"output"`
		PrevExist  bool    `json:"prev_exist"`
		NewContent *string `json:"new_content"`
	}
	edit := func(body map[string]any) res {
		t.Helper()
		body["path"] = f
		return okData[res](t, ts, "/v1/file/str_replace_editor", body)
	}
	disk := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(ts.ws, "notes.txt"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if r := edit(map[string]any{"command": "create", "file_text": "alpha\nbeta\ngamma\n"}); r.PrevExist || disk() != "alpha\nbeta\ngamma\n" {
		t.Fatalf("create: %+v %q", r, disk())
	}
	if r := edit(map[string]any{"command": "view", "view_range": []int{2, -1}}); !strings.HasSuffix(r.Output, "     2\tbeta\n     3\tgamma\n") {
		t.Fatalf("view: %q", r.Output)
	}
	edit(map[string]any{"command": "str_replace", "old_str": "beta", "new_str": "BETA"})
	edit(map[string]any{"command": "insert", "insert_line": 0, "new_str": "top"})
	if got := disk(); got != "top\nalpha\nBETA\ngamma\n" {
		t.Fatalf("after str_replace+insert: %q", got)
	}
	edit(map[string]any{"command": "undo_edit"})
	if got := disk(); got != "alpha\nBETA\ngamma\n" {
		t.Fatalf("after one undo: %q", got)
	}
	edit(map[string]any{"command": "undo_edit"})
	if got := disk(); got != "alpha\nbeta\ngamma\n" {
		t.Fatalf("after two undos: %q", got)
	}
	for _, tc := range []struct {
		body   map[string]any
		status int
	}{
		{map[string]any{"command": "undo_edit"}, http.StatusConflict},
		{map[string]any{"command": "create", "file_text": "x"}, http.StatusConflict},
		{map[string]any{"command": "str_replace", "old_str": "a"}, http.StatusUnprocessableEntity}, // not unique
		{map[string]any{"command": "insert", "insert_line": 9, "new_str": "x"}, http.StatusUnprocessableEntity},
	} {
		tc.body["path"] = f
		if r := ts.post(t, "/v1/file/str_replace_editor", tc.body); r.Status != tc.status {
			t.Fatalf("%v: %d %s", tc.body, r.Status, r.Body)
		}
	}
	if r := ts.post(t, "/v1/file/str_replace_editor", map[string]any{"command": "create", "path": vSkills + "/new.md", "file_text": "x"}); r.Status != http.StatusForbidden {
		t.Fatalf("create in a read-only mount: %d", r.Status)
	}
	type search struct {
		Matches     []string `json:"matches"`
		LineNumbers []int    `json:"line_numbers"`
	}
	if s := okData[search](t, ts, "/v1/file/search", map[string]any{"file": f, "regex": "^(alpha|gamma)$"}); !slices.Equal(s.LineNumbers, []int{1, 3}) || !slices.Equal(s.Matches, []string{"alpha", "gamma"}) {
		t.Fatalf("search: %+v", s)
	}
}
