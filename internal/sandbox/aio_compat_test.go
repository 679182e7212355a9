package sandbox

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
)

// The shapes DeerFlow's tools and the agent_sandbox SDK (0.0.30/0.0.31)
// decode; each of these broke them before (issue 16).

// TestGrepResultShape: the SDK's FileGrepResult requires path and pattern
// and DeerFlow's grep tool reads match_count and the file counters.
func TestGrepResultShape(t *testing.T) {
	t.Parallel()
	ts := newSearchServer(t)
	type result struct {
		Path          *string     `json:"path"`
		Pattern       *string     `json:"pattern"`
		Matches       []grepMatch `json:"matches"`
		MatchCount    *int        `json:"match_count"`
		FilesSearched *int        `json:"files_searched"`
		FilesMatched  *int        `json:"files_matched"`
	}
	r := okData[result](t, ts, "/v1/file/grep", map[string]any{"path": vWorkspace + "/src", "pattern": "(?i)hello"})
	if r.Path == nil || *r.Path != vWorkspace+"/src" || r.Pattern == nil || *r.Pattern != "(?i)hello" {
		t.Fatalf("path/pattern missing or wrong: %+v", r)
	}
	// src holds app.py (2 hits), lib/notes.md (1 hit), lib/util.py (none)
	if r.MatchCount == nil || *r.MatchCount != 3 || len(r.Matches) != 3 ||
		r.FilesSearched == nil || *r.FilesSearched != 3 || r.FilesMatched == nil || *r.FilesMatched != 2 {
		t.Fatalf("counters: match_count %v files_searched %v files_matched %v, %d matches",
			deref(r.MatchCount), deref(r.FilesSearched), deref(r.FilesMatched), len(r.Matches))
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestGlobResultShape: FileGlobResult requires pattern, and files are
// GlobFileInfo objects; AIO's defaults are files only, no hidden entries.
func TestGlobResultShape(t *testing.T) {
	t.Parallel()
	ts := newSearchServer(t)
	type info struct {
		Path        string `json:"path"`
		Name        string `json:"name"`
		IsDirectory bool   `json:"is_directory"`
		Size        *int64 `json:"size"`
	}
	type result struct {
		Path       string `json:"path"`
		Pattern    string `json:"pattern"`
		Files      []info `json:"files"`
		TotalCount int    `json:"total_count"`
	}
	for _, tc := range []struct {
		name string
		body map[string]any
		want []string
	}{
		{"defaults", map[string]any{"pattern": "**/*.py"}, []string{"main.py", "src/app.py", "src/lib/util.py"}},
		{"hidden", map[string]any{"pattern": "**/*.py", "include_hidden": true}, []string{".hidden/h.py", "main.py", "src/app.py", "src/lib/util.py"}},
		{"dirs", map[string]any{"pattern": "src/*", "files_only": false}, []string{"src/app.py", "src/lib"}},
		{"exclude", map[string]any{"pattern": "**/*.py", "exclude": []string{"lib"}}, []string{"main.py", "src/app.py"}},
		{"max", map[string]any{"pattern": "**/*.py", "max_results": 1}, []string{"main.py"}},
		{"desc", map[string]any{"pattern": "*.py", "sort_desc": true, "include_hidden": true}, []string{"main.py"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.body["path"] = vWorkspace
			r := okData[result](t, ts, "/v1/file/glob", tc.body)
			var got []string
			for _, f := range r.Files {
				if f.Name == "" || f.Size == nil || f.IsDirectory != (f.Name == "lib") {
					t.Fatalf("GlobFileInfo incomplete: %+v", f)
				}
				got = append(got, f.Path[len(vWorkspace)+1:])
			}
			if r.Pattern != tc.body["pattern"] || r.Path != vWorkspace || r.TotalCount != len(tc.want) || !slices.Equal(got, tc.want) {
				t.Fatalf("got %+v (%v), want %v", r, got, tc.want)
			}
		})
	}
	r := ts.post(t, "/v1/file/glob", map[string]any{"path": vWorkspace, "pattern": "*", "sort_by": "color"})
	if r.Status != http.StatusUnprocessableEntity {
		t.Fatalf("unknown sort_by: %d %s", r.Status, r.Body)
	}
}

// TestBashSessionState: bash sessions as AIO 1.9.4's BashExecRequest says.
// session_id: "If not provided or empty, a new session is created
// automatically. Reuse the same session_id to continue the same bash
// session. Only API-level session state is preserved across calls. Note:
// `cd` or `export` inside a command do NOT affect subsequent calls."
// exec_dir: "if the session already exists, its default working directory
// is updated for subsequent calls." Each case runs a first call, then
// `pwd` and the variables in the same session: the second call sees the
// session's default dir and none of the first call's cd, export or env,
// nor the default shell session's state (DeerFlow's request-scoped secrets
// must never reach a later command).
func TestBashSessionState(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	shellRun(t, ts, map[string]any{"command": "cd /mnt/user-data/outputs && export AGENT_STATE=agent"})
	const outputs, uploads = "/mnt/user-data/outputs", "/mnt/user-data/uploads"
	const firstCmd = `export X="x$SECRET"; cd ` + outputs
	cases := []struct {
		name   string
		create map[string]any // bash/sessions/create body; nil: the first call gives no session_id
		first  map[string]any // the first bash/exec, less session_id
		dir    string         // the session's default dir the second call must start in
	}{
		{"session-less id is reusable", nil, map[string]any{"command": firstCmd, "env": map[string]any{"SECRET": "s3cret"}}, vWorkspace},
		{"explicit session keeps its dir", map[string]any{"exec_dir": uploads}, map[string]any{"command": firstCmd}, uploads},
		{"exec_dir moves the default", map[string]any{}, map[string]any{"command": firstCmd, "exec_dir": uploads}, uploads},
		{"session-less exec_dir moves the default", nil, map[string]any{"command": firstCmd, "exec_dir": uploads}, uploads},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				if tc.create != nil {
					tc.first["session_id"] = okData[bashSessionInfo](t, ts, "/v1/bash/sessions/create", tc.create).SessionID
				}
				first := okData[bashResult](t, ts, "/v1/bash/exec", tc.first)
				if first.SessionID == "" || tc.create != nil && first.SessionID != tc.first["session_id"] {
					t.Fatalf("first call answered session %q", first.SessionID)
				}
				// okData requires a 200: the session outlives its first command.
				second := map[string]any{"session_id": first.SessionID, "command": `pwd; echo "[$X][$SECRET][$AGENT_STATE]"`}
				if got := okData[bashResult](t, ts, "/v1/bash/exec", second); got.Stdout != tc.dir+"\n[][][]\n" {
					t.Fatalf("second call in the session: %q, want the session's dir %s and no variables", got.Stdout, tc.dir)
				}
			})
		}
	})
	if after := shellRun(t, ts, map[string]any{"command": `pwd; echo "[$X][$SECRET][$AGENT_STATE]"`}); after.Output != outputs+"\n[][][agent]\n" {
		t.Fatalf("bash/exec changed the default shell session: %q", after.Output)
	}
}

// TestSandboxDataNull: AIO 1.9.4's SandboxResponse.data is string|null; the
// context is at the top level.
func TestSandboxDataNull(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	r := ts.do(t, http.MethodGet, "/v1/sandbox", nil)
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.Body), &top); err != nil || string(top["data"]) != "null" {
		t.Fatalf("data = %s, want null", top["data"])
	}
	for _, k := range []string{"home_dir", "version", "detail"} {
		if _, ok := top[k]; !ok {
			t.Fatalf("required %s missing: %s", k, r.Body)
		}
	}
}
