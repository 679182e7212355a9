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

// TestBashExecFreshSession: bash/exec without session_id runs in a new
// session (AIO BashExecRequest): it inherits no cd/export of the default
// session, leaves none behind, and a request-scoped env variable the
// command exports is never visible to a later call.
func TestBashExecFreshSession(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	shellRun(t, ts, map[string]any{"command": "cd /mnt/user-data/outputs && export AGENT_STATE=agent"})
	sessions := len(ts.srv.sessions.all())

	env := okData[bashResult](t, ts, "/v1/bash/exec", map[string]any{
		"command": `pwd; echo "[$AGENT_STATE]"; export LEAKED="$SECRET"; cd /mnt/user-data/uploads`,
		"env":     map[string]any{"SECRET": "s3cret-value"},
	})
	if env.Stdout != vWorkspace+"\n[]\n" {
		t.Fatalf("env-bearing bash/exec inherited the default session's state: %q", env.Stdout)
	}
	after := shellRun(t, ts, map[string]any{"command": `pwd; echo "[$LEAKED][$SECRET][$AGENT_STATE]"`})
	if after.Output != "/mnt/user-data/outputs\n[][][agent]\n" {
		t.Fatalf("bash/exec leaked into the default session: %q", after.Output)
	}
	again := okData[bashResult](t, ts, "/v1/bash/exec", map[string]any{"command": `pwd; echo "[$LEAKED][$SECRET]"`})
	if again.Stdout != vWorkspace+"\n[][]\n" || again.SessionID == env.SessionID {
		t.Fatalf("a later bash/exec saw the earlier one: %+v", again)
	}
	if n := len(ts.srv.sessions.all()); n != sessions {
		t.Fatalf("finished id-less bash/exec calls left sessions behind: %d, want %d", n, sessions)
	}
	if r := ts.post(t, "/v1/bash/exec", map[string]any{"session_id": env.SessionID, "command": "true"}); r.Status != http.StatusNotFound {
		t.Fatalf("the throw-away session is still usable: %d %s", r.Status, r.Body)
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
