package sandbox

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// tree creates files (relative to dir); a name ending in "/" is a directory.
func tree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func newSearchServer(t *testing.T) *testServer {
	ts := newHostServer(t)
	tree(t, ts.ws, map[string]string{
		"main.py":          "import os\nprint('Hello')\n",
		"src/app.py":       "def hello():\n    return 'HELLO world'\n",
		"src/lib/util.py":  "x = 1\n",
		"src/lib/notes.md": "hello again\n",
		".hidden/h.py":     "hello hidden\n",
		"bin.dat":          "hello\x00binary",
		"empty/":           "",
	})
	return ts
}

type filesResult struct {
	Files     pathList `json:"files"`
	Truncated bool     `json:"truncated"`
}

// pathList decodes find's path strings and glob's GlobFileInfo objects alike.
type pathList []string

func (p *pathList) UnmarshalJSON(b []byte) error {
	var objs []struct{ Path string }
	if err := json.Unmarshal(b, &objs); err == nil {
		*p = pathList{}
		for _, o := range objs {
			*p = append(*p, o.Path)
		}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(p))
}

func TestFileFindAndGlob(t *testing.T) {
	t.Parallel()
	ts := newSearchServer(t)
	w := vWorkspace + "/"
	for _, tc := range []struct {
		endpoint, field, path, pattern string
		want                           []string
	}{
		{"find", "glob", vWorkspace, "*.py", []string{w + ".hidden/h.py", w + "main.py", w + "src/app.py", w + "src/lib/util.py"}},
		{"find", "glob", vWorkspace, "src/*.py", []string{w + "src/app.py"}},
		{"find", "glob", vWorkspace, "**/lib/*", []string{w + "src/lib/notes.md", w + "src/lib/util.py"}},
		{"find", "glob", vWorkspace + "/src", "*.md", []string{w + "src/lib/notes.md"}},
		{"find", "glob", vWorkspace, vWorkspace + "/src/**/*.md", []string{w + "src/lib/notes.md"}},
		{"find", "glob", vWorkspace, "*.none", []string{}},
		{"glob", "pattern", vWorkspace, "*", []string{w + ".hidden", w + "bin.dat", w + "empty", w + "main.py", w + "src"}},
		{"glob", "pattern", vWorkspace, "**/*.py", []string{w + ".hidden/h.py", w + "main.py", w + "src/app.py", w + "src/lib/util.py"}},
		{"glob", "pattern", vWorkspace, "src/**", []string{w + "src", w + "src/app.py", w + "src/lib", w + "src/lib/notes.md", w + "src/lib/util.py"}},
		{"glob", "pattern", vWorkspace, "src/l?b", []string{w + "src/lib"}},
	} {
		t.Run(tc.endpoint+" "+tc.pattern, func(t *testing.T) {
			body := map[string]any{"path": tc.path, tc.field: tc.pattern}
			if tc.endpoint == "glob" { // AIO's defaults skip both
				body["files_only"], body["include_hidden"] = false, true
			}
			r := okData[filesResult](t, ts, "/v1/file/"+tc.endpoint, body)
			slices.Sort(r.Files)
			if !slices.Equal(r.Files, pathList(tc.want)) || r.Truncated {
				t.Fatalf("got %v, want %v", r.Files, tc.want)
			}
		})
	}
}

func TestFileList(t *testing.T) {
	t.Parallel()
	ts := newSearchServer(t)
	type listResult struct {
		Files          []listEntry `json:"files"`
		TotalCount     int         `json:"total_count"`
		DirectoryCount int         `json:"directory_count"`
	}
	names := func(r listResult) []string {
		var out []string
		for _, f := range r.Files {
			out = append(out, strings.TrimPrefix(f.Path, vWorkspace+"/"))
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		name string
		body map[string]any
		want []string
	}{
		{"flat", map[string]any{}, []string{"bin.dat", "empty", "main.py", "src"}},
		{"hidden", map[string]any{"show_hidden": true}, []string{".hidden", "bin.dat", "empty", "main.py", "src"}},
		{"recursive", map[string]any{"recursive": true}, []string{"bin.dat", "empty", "main.py", "src", "src/app.py", "src/lib", "src/lib/notes.md", "src/lib/util.py"}},
		{"max depth", map[string]any{"recursive": true, "max_depth": 2}, []string{"bin.dat", "empty", "main.py", "src", "src/app.py", "src/lib"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.body["path"] = vWorkspace
			r := okData[listResult](t, ts, "/v1/file/list", tc.body)
			if got := names(r); !slices.Equal(got, tc.want) || r.TotalCount != len(tc.want) {
				t.Fatalf("got %v (total %d), want %v", got, r.TotalCount, tc.want)
			}
		})
	}
	if err := os.Symlink(filepath.Join(ts.ws, "src"), filepath.Join(ts.ws, "srclink")); err != nil {
		t.Fatal(err)
	}
	linked := okData[listResult](t, ts, "/v1/file/list", map[string]any{"path": vWorkspace + "/srclink"})
	if len(linked.Files) != 2 || linked.Files[0].Path != vWorkspace+"/srclink/app.py" {
		t.Fatalf("listing through a symlinked dir: %+v", linked.Files)
	}
	r := okData[listResult](t, ts, "/v1/file/list", map[string]any{"path": vWorkspace + "/src"})
	for _, f := range r.Files {
		if f.Name == "app.py" && (f.IsDirectory || f.Size != 38 || f.ModifiedTime == "" || f.Permissions != "0644") {
			t.Fatalf("entry: %+v", f)
		}
		if f.Name == "lib" && !f.IsDirectory {
			t.Fatalf("lib not a directory: %+v", f)
		}
	}
}

func TestFileGrep(t *testing.T) {
	t.Parallel()
	ts := newSearchServer(t)
	type grepResult struct {
		Matches   []grepMatch `json:"matches"`
		Truncated bool        `json:"truncated"`
	}
	hits := func(r grepResult) []string {
		var out []string
		for _, m := range r.Matches {
			out = append(out, strings.TrimPrefix(m.File, vWorkspace+"/")+":"+strconv.Itoa(m.LineNumber)+":"+m.LineContent)
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		name string
		body map[string]any
		want []string
	}{
		{"case sensitive", map[string]any{"pattern": "hello"}, []string{".hidden/h.py:1:hello hidden", "src/app.py:1:def hello():", "src/lib/notes.md:1:hello again"}},
		{"case insensitive", map[string]any{"pattern": "^print|HELLO w", "case_insensitive": true}, []string{"main.py:2:print('Hello')", "src/app.py:2:    return 'HELLO world'"}},
		{"fixed string", map[string]any{"pattern": "print('", "fixed_strings": true}, []string{"main.py:2:print('Hello')"}},
		{"not recursive", map[string]any{"pattern": "o", "recursive": false}, []string{"main.py:1:import os", "main.py:2:print('Hello')"}},
		{"single file", map[string]any{"path": vWorkspace + "/src/app.py", "pattern": "world"}, []string{"src/app.py:2:    return 'HELLO world'"}},
		{"size limit", map[string]any{"pattern": "hello", "max_file_size": "12"}, []string{"src/lib/notes.md:1:hello again"}},
		// include/exclude are ripgrep's --glob / --glob '!…': a name pattern
		// matches at any depth, a path pattern from the search root
		{"include by name", map[string]any{"pattern": "hello", "include": []string{"*.md", "*.txt"}}, []string{"src/lib/notes.md:1:hello again"}},
		{"include by path", map[string]any{"pattern": "hello", "include": []string{"src/**"}}, []string{"src/app.py:1:def hello():", "src/lib/notes.md:1:hello again"}},
		{"include absolute", map[string]any{"pattern": "hello", "include": []string{vWorkspace + "/src/*.py"}}, []string{"src/app.py:1:def hello():"}},
		{"exclude prunes a directory", map[string]any{"pattern": "hello", "exclude": []string{"src"}}, []string{".hidden/h.py:1:hello hidden"}},
		{"exclude directories only", map[string]any{"pattern": "hello", "exclude": []string{"lib/", "app.py/"}}, []string{".hidden/h.py:1:hello hidden", "src/app.py:1:def hello():"}},
		{"exclude beats include", map[string]any{"pattern": "hello", "include": []string{"*.py"}, "exclude": []string{".hidden"}}, []string{"src/app.py:1:def hello():"}},
		{"single file excluded", map[string]any{"path": vWorkspace + "/src/app.py", "pattern": "world", "exclude": []string{"*.py"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.body["path"] == nil {
				tc.body["path"] = vWorkspace
			}
			r := okData[grepResult](t, ts, "/v1/file/grep", tc.body)
			if got := hits(r); !slices.Equal(got, tc.want) || r.Truncated {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	r := okData[grepResult](t, ts, "/v1/file/grep", map[string]any{"path": vWorkspace, "pattern": "l", "max_results": 2})
	if len(r.Matches) != 2 || !r.Truncated {
		t.Fatalf("max_results: %+v", r)
	}
}

// TestFileGrepContext checks context_before/context_after (rg -B/-A): each
// match carries its own neighbouring lines, cut at the file's ends, even
// when a neighbour is itself a match.
func TestFileGrepContext(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	tree(t, ts.ws, map[string]string{"c.txt": "a\nb\nM1\nc\nM2\nd\n"})
	type ctx struct{ Before, After []string }
	for _, tc := range []struct {
		name          string
		before, after int
		want          []ctx
	}{
		{"none", 0, 0, []ctx{{}, {}}},
		{"both", 2, 2, []ctx{{[]string{"a", "b"}, []string{"c", "M2"}}, {[]string{"M1", "c"}, []string{"d"}}}},
		{"cut at the ends", 5, 5, []ctx{{[]string{"a", "b"}, []string{"c", "M2", "d"}}, {[]string{"a", "b", "M1", "c"}, []string{"d"}}}},
		{"after only", 0, 1, []ctx{{nil, []string{"c"}}, {nil, []string{"d"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := okData[struct{ Matches []grepMatch }](t, ts, "/v1/file/grep", map[string]any{
				"path": vWorkspace, "pattern": "^M", "context_before": tc.before, "context_after": tc.after})
			var got []ctx
			for _, m := range r.Matches {
				got = append(got, ctx{m.ContextBefore, m.ContextAfter})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSearchErrors(t *testing.T) {
	t.Parallel()
	ts := newSearchServer(t)
	for _, tc := range []struct {
		path   string
		body   map[string]any
		status int
		field  string
	}{
		{"/v1/file/find", map[string]any{"glob": "*"}, http.StatusUnprocessableEntity, "path"},
		{"/v1/file/find", map[string]any{"path": vWorkspace}, http.StatusUnprocessableEntity, "glob"},
		{"/v1/file/find", map[string]any{"path": vWorkspace, "glob": "[a-"}, http.StatusUnprocessableEntity, "glob"},
		{"/v1/file/find", map[string]any{"path": vWorkspace, "glob": "/etc/*"}, http.StatusUnprocessableEntity, "glob"},
		{"/v1/file/glob", map[string]any{"path": vWorkspace}, http.StatusUnprocessableEntity, "pattern"},
		{"/v1/file/glob", map[string]any{"path": "/etc", "pattern": "*"}, http.StatusForbidden, ""},
		{"/v1/file/list", map[string]any{"path": vWorkspace + "/main.py"}, http.StatusUnprocessableEntity, "path"},
		{"/v1/file/list", map[string]any{"path": vWorkspace + "/nope"}, http.StatusNotFound, ""},
		{"/v1/file/list", map[string]any{"path": vWorkspace, "recursive": true, "max_depth": 0}, http.StatusUnprocessableEntity, "max_depth"},
		{"/v1/file/grep", map[string]any{"path": vWorkspace}, http.StatusUnprocessableEntity, "pattern"},
		{"/v1/file/grep", map[string]any{"path": vWorkspace, "pattern": "(unclosed"}, http.StatusUnprocessableEntity, "pattern"},
		{"/v1/file/grep", map[string]any{"path": vWorkspace, "pattern": "x", "max_results": 0}, http.StatusUnprocessableEntity, "max_results"},
		{"/v1/file/grep", map[string]any{"path": vWorkspace, "pattern": "x", "max_file_size": "lots"}, http.StatusUnprocessableEntity, "max_file_size"},
		{"/v1/file/grep", map[string]any{"path": "/mnt/user-data/workspace/../../..", "pattern": "x"}, http.StatusForbidden, ""},
		{"/v1/file/grep", map[string]any{"path": vWorkspace, "pattern": "x", "include": []string{"[a-"}}, http.StatusUnprocessableEntity, "include"},
		{"/v1/file/grep", map[string]any{"path": vWorkspace, "pattern": "x", "exclude": []string{"/etc/*"}}, http.StatusUnprocessableEntity, "exclude"},
		{"/v1/file/grep", map[string]any{"path": vWorkspace, "pattern": "x", "context_before": 21}, http.StatusUnprocessableEntity, "context_before"},
		{"/v1/file/grep", map[string]any{"path": vWorkspace, "pattern": "x", "context_after": -1}, http.StatusUnprocessableEntity, "context_after"},
	} {
		t.Run(tc.path+" "+string(mustJSON(t, tc.body)), func(t *testing.T) {
			wantStatus(t, ts.post(t, tc.path, tc.body), tc.status, tc.field)
		})
	}
}

func TestMatchGlob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, rel string
		want         bool
	}{
		{"*.py", "a.py", true},
		{"*.py", "d/a.py", false},
		{"**/*.py", "a.py", true},
		{"**/*.py", "d/e/a.py", true},
		{"d/**", "d/e/a.py", true},
		{"d/**", "d", true},
		{"d/**/a.py", "d/a.py", true},
		{"d/**/a.py", "d/x/y/a.py", true},
		{"d/**/a.py", "e/x/a.py", false},
		{"**", "anything/at/all", true},
		{"d/*/a.py", "d/x/y/a.py", false},
		{"[ab].txt", "b.txt", true},
		{"**/**/x", "x", true},
	} {
		if got := matchGlob(tc.pattern, tc.rel); got != tc.want {
			t.Errorf("matchGlob(%q, %q) = %v, want %v", tc.pattern, tc.rel, got, tc.want)
		}
	}
}
