package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	sandboxsrv "github.com/sandgate/sandgate/internal/sandbox"
)

// newSession serves thread t1's MCP endpoint over a real sandbox server
// (host mode, as the process backend runs it) standing in for the
// gateway's /threads/t1/v1/..., and connects the SDK's own client.
func newSession(t *testing.T) (*sdk.ClientSession, string) {
	t.Helper()
	root := t.TempDir()
	var maps []sandboxsrv.Mapping
	for _, sub := range []string{"workspace", "uploads", "outputs"} {
		host := filepath.Join(root, sub)
		if err := os.MkdirAll(host, 0o755); err != nil {
			t.Fatal(err)
		}
		maps = append(maps, sandboxsrv.Mapping{Virtual: "/mnt/user-data/" + sub, Host: host})
	}
	sb, err := sandboxsrv.New(sandboxsrv.Config{Mappings: maps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Shutdown(); sb.Close() })
	srv := New(http.StripPrefix("/threads/t1", sb.Handler()), nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { srv.ServeThread(w, r, "t1") }))
	t.Cleanup(hs.Close)
	return connect(t, hs.URL), filepath.Join(root, "workspace")
}

func connect(t *testing.T, url string) *sdk.ClientSession { return connectAs(t, url, "") }

// connectAs connects with auth as every request's Authorization header
// ("": none).
func connectAs(t *testing.T, url, auth string) *sdk.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr := &sdk.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true}
	if auth != "" {
		tr.HTTPClient = &http.Client{Transport: bearer{auth}}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// callTool returns the text of a tool's result and whether it is an error.
func callTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

func TestToolsList(t *testing.T) {
	t.Parallel()
	cs, _ := newSession(t)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("%s has no description", tool.Name)
		}
	}
	slices.Sort(names)
	want := []string{"bash", "checkpoint", "expose_port", "fork_thread", "glob", "grep", "list_checkpoints", "list_templates", "ls", "read_file",
		"restore_checkpoint", "str_replace", "use_template", "write_file"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	// The checkpoint tools tell an agent when to use them.
	for name, when := range map[string]string{"checkpoint": "before a risky change", "restore_checkpoint": "undo a bad turn",
		"list_checkpoints": "to restore", "fork_thread": "alternative approach",
		"list_templates": "which is the default", "use_template": "Files under /mnt/user-data stay; running processes stop"} {
		i := slices.IndexFunc(res.Tools, func(tool *sdk.Tool) bool { return tool.Name == name })
		if i < 0 || !strings.Contains(res.Tools[i].Description, when) {
			t.Errorf("%s's description does not say when to use it (%q)", name, when)
		}
	}
	for _, tool := range res.Tools {
		if tool.Name != "read_file" {
			continue
		}
		schema, _ := json.Marshal(tool.InputSchema)
		for _, p := range []string{`"start_line"`, `"end_line"`, `"required":["path"]`} {
			if !strings.Contains(string(schema), p) {
				t.Errorf("read_file schema lacks %s: %s", p, schema)
			}
		}
	}
}

// TestTools drives each tool over a real sandbox: outputs in DeerFlow's
// shapes, and bad input as isError results with clear text.
func TestTools(t *testing.T) {
	t.Parallel()
	cs, ws := newSession(t)
	const w = "/mnt/user-data/workspace"
	for _, f := range []struct{ name, body string }{
		{"src/main.py", "import os\nprint('Hello')\n"},
		{"src/pkg/util.py", "def hello():\n    return 'HELLO'\n"},
		{"node_modules/dep/index.py", "hello = 1\n"},
		{"notes.md", "hello notes\n"},
		{".hidden/secret.txt", "x\n"},
	} {
		p := filepath.Join(ws, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	binary := filepath.Join(ws, "blob.bin")
	if err := os.WriteFile(binary, []byte{0, 1, 2, 0xff}, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		tool    string
		args    map[string]any
		want    []string // substrings of the text, in order
		exact   string   // the whole text, when set
		isError bool
	}{
		{name: "bash starts in workspace", tool: "bash", args: map[string]any{"command": "pwd; echo hi"},
			exact: w + "\nhi\n"},
		{name: "bash exit code", tool: "bash", args: map[string]any{"command": "echo out; exit 3"},
			exact: "out\n\nExit Code: 3"},
		{name: "bash silent failure", tool: "bash", args: map[string]any{"command": "exit 2"},
			exact: "Command exited with code 2"},
		{name: "bash no output", tool: "bash", args: map[string]any{"command": "true"}, exact: "(no output)"},
		{name: "bash empty", tool: "bash", args: map[string]any{"command": " "}, isError: true, exact: "Error: command is required"},
		{name: "bash output limit", tool: "bash", args: map[string]any{"command": "head -c 30000 /dev/zero | tr '\\0' a; echo; echo END"},
			want: []string{"aaa", "[middle truncated: ", "END"}},

		{name: "write", tool: "write_file", args: map[string]any{"path": w + "/out/a.txt", "content": "one\n"}, exact: "OK"},
		{name: "append", tool: "write_file", args: map[string]any{"path": w + "/out/a.txt", "content": "two\nthree\n", "append": true}, exact: "OK"},
		{name: "read all", tool: "read_file", args: map[string]any{"path": w + "/out/a.txt"}, exact: "one\ntwo\nthree\n"},
		{name: "read range", tool: "read_file", args: map[string]any{"path": w + "/out/a.txt", "start_line": 2, "end_line": 2}, exact: "two\n"},
		{name: "read from", tool: "read_file", args: map[string]any{"path": w + "/out/a.txt", "start_line": 3}, exact: "three\n"},
		{name: "read past end", tool: "read_file", args: map[string]any{"path": w + "/out/a.txt", "start_line": 9}, exact: "(start_line exceeds file length)"},
		{name: "read start 0", tool: "read_file", args: map[string]any{"path": w + "/out/a.txt", "start_line": 0}, isError: true, exact: "(start_line must be >= 1)"},
		{name: "read inverted", tool: "read_file", args: map[string]any{"path": w + "/out/a.txt", "start_line": 3, "end_line": 2}, isError: true,
			want: []string{"start_line > end_line"}},
		{name: "read missing", tool: "read_file", args: map[string]any{"path": w + "/nope.txt"}, isError: true, exact: "Error: File not found: " + w + "/nope.txt"},
		{name: "read dir", tool: "read_file", args: map[string]any{"path": w + "/src"}, isError: true, exact: "Error: Path is a directory, not a file: " + w + "/src"},
		{name: "read binary", tool: "read_file", args: map[string]any{"path": w + "/blob.bin"}, isError: true, want: []string{"binary file"}},
		{name: "read relative", tool: "read_file", args: map[string]any{"path": "out/a.txt"}, isError: true, want: []string{"must be absolute"}},
		{name: "read outside mounts", tool: "read_file", args: map[string]any{"path": "/etc/passwd"}, isError: true, want: []string{"Error: "}},
		{name: "write too large", tool: "write_file", args: map[string]any{"path": w + "/big.txt", "content": strings.Repeat("x", 80*1024+1)}, isError: true,
			want: []string{"81921 bytes", "81920-byte single-call limit", "append=true"}},
		{name: "append is not capped", tool: "write_file", args: map[string]any{"path": w + "/big.txt", "content": strings.Repeat("x", 80*1024+1), "append": true}, exact: "OK"},

		{name: "replace first", tool: "str_replace", args: map[string]any{"path": w + "/out/a.txt", "old_str": "o", "new_str": "0"}, exact: "OK"},
		{name: "after first", tool: "read_file", args: map[string]any{"path": w + "/out/a.txt"}, exact: "0ne\ntwo\nthree\n"},
		{name: "replace all", tool: "str_replace", args: map[string]any{"path": w + "/out/a.txt", "old_str": "e", "new_str": "E", "replace_all": true}, exact: "OK"},
		{name: "after all", tool: "read_file", args: map[string]any{"path": w + "/out/a.txt"}, exact: "0nE\ntwo\nthrEE\n"},
		{name: "replace missing", tool: "str_replace", args: map[string]any{"path": w + "/out/a.txt", "old_str": "zzz", "new_str": "y"}, isError: true,
			exact: "Error: String to replace not found in file: " + w + "/out/a.txt"},
		{name: "replace no file", tool: "str_replace", args: map[string]any{"path": w + "/none", "old_str": "a", "new_str": "b"}, isError: true,
			exact: "Error: File not found: " + w + "/none"},

		{name: "ls", tool: "ls", args: map[string]any{"path": w + "/src"}, exact: w + "/src\n" + w + "/src/main.py\n" + w + "/src/pkg\n" + w + "/src/pkg/util.py"},
		{name: "ls empty", tool: "ls", args: map[string]any{"path": "/mnt/user-data/outputs"}, exact: "(empty)"},
		{name: "ls missing", tool: "ls", args: map[string]any{"path": w + "/nope"}, isError: true, exact: "Error: Directory not found: " + w + "/nope"},

		{name: "glob by name at any depth", tool: "glob", args: map[string]any{"pattern": "*.py", "path": w},
			exact: "Found 2 paths under " + w + "\n1. " + w + "/src/main.py\n2. " + w + "/src/pkg/util.py"},
		{name: "glob anchored", tool: "glob", args: map[string]any{"pattern": "src/*.py", "path": w},
			exact: "Found 1 paths under " + w + "\n1. " + w + "/src/main.py"},
		{name: "glob dirs", tool: "glob", args: map[string]any{"pattern": "p*", "path": w + "/src", "include_dirs": true},
			exact: "Found 1 paths under " + w + "/src\n1. " + w + "/src/pkg"},
		{name: "glob limit", tool: "glob", args: map[string]any{"pattern": "**/*.py", "path": w, "max_results": 1},
			exact: "Found 1 paths under " + w + " (showing first 1)\n1. " + w + "/src/main.py\nResults truncated. Narrow the path or pattern to see fewer matches."},
		{name: "glob none", tool: "glob", args: map[string]any{"pattern": "*.rs", "path": w}, exact: "No files matched under " + w},
		{name: "glob max 0", tool: "glob", args: map[string]any{"pattern": "*", "path": w, "max_results": 0}, isError: true, want: []string{"max_results must be >= 1"}},
		{name: "glob absolute pattern", tool: "glob", args: map[string]any{"pattern": "/etc/*", "path": w}, isError: true, want: []string{"must be relative"}},
		{name: "glob missing", tool: "glob", args: map[string]any{"pattern": "*", "path": w + "/nope"}, isError: true, exact: "Error: Directory not found: " + w + "/nope"},

		{name: "grep case-insensitive by default", tool: "grep", args: map[string]any{"pattern": "hello", "path": w},
			exact: "Found 4 matches under " + w + "\n" + w + "/notes.md:1: hello notes\n" + w + "/src/main.py:2: print('Hello')\n" +
				w + "/src/pkg/util.py:1: def hello():\n" + w + "/src/pkg/util.py:2:     return 'HELLO'"},
		{name: "grep case-sensitive + glob", tool: "grep", args: map[string]any{"pattern": "HEL+O", "path": w, "glob": "**/*.py", "case_sensitive": true},
			exact: "Found 1 matches under " + w + "\n" + w + "/src/pkg/util.py:2:     return 'HELLO'"},
		{name: "grep literal", tool: "grep", args: map[string]any{"pattern": "print('", "path": w, "literal": true},
			exact: "Found 1 matches under " + w + "\n" + w + "/src/main.py:2: print('Hello')"},
		{name: "grep one file", tool: "grep", args: map[string]any{"pattern": "import", "path": w + "/src/main.py"},
			exact: "Found 1 matches under " + w + "/src/main.py\n" + w + "/src/main.py:1: import os"},
		{name: "grep limit", tool: "grep", args: map[string]any{"pattern": "hello", "path": w, "max_results": 2},
			want: []string{"Found 2 matches under " + w + " (showing first 2)", "Results truncated. Narrow the path or add a glob filter."}},
		{name: "grep none", tool: "grep", args: map[string]any{"pattern": "zebra", "path": w}, exact: "No matches found under " + w},
		{name: "grep bad regex", tool: "grep", args: map[string]any{"pattern": "(", "path": w}, isError: true, want: []string{"Error: Invalid regex pattern"}},
		{name: "grep missing", tool: "grep", args: map[string]any{"pattern": "x", "path": w + "/nope"}, isError: true, exact: "Error: Directory not found: " + w + "/nope"},
	} {
		// Sequential: later cases read what earlier ones wrote.
		got, isErr := callTool(t, cs, tc.tool, tc.args)
		if isErr != tc.isError {
			t.Errorf("%s: isError %v, want %v: %q", tc.name, isErr, tc.isError, got)
		}
		if tc.exact != "" && got != tc.exact {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.exact)
		}
		rest := got
		for _, w := range tc.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Errorf("%s: %q lacks %q (in order)", tc.name, truncateRunes(got, 400), w)
				break
			}
			rest = rest[i+len(w):]
		}
	}
}

// Arguments of the wrong type or missing are refused before any sandbox
// call, as an MCP error the client sees, never a crash.
func TestBadArguments(t *testing.T) {
	t.Parallel()
	cs, _ := newSession(t)
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"read_file", map[string]any{"path": "/mnt/user-data/workspace/a", "start_line": "two"}},
		{"read_file", map[string]any{}},
		{"write_file", map[string]any{"path": "/mnt/user-data/workspace/a"}},
		{"grep", map[string]any{"pattern": "x", "path": "/mnt/user-data/workspace", "max_results": 1.5}},
		{"nosuch", map[string]any{}},
	} {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tc.tool, Arguments: tc.args})
		if err == nil && !res.IsError {
			t.Errorf("%s %v: accepted", tc.tool, tc.args)
		}
	}
}

// A refusal of the gateway itself (quota, capacity, auth) is a tool error
// naming the gateway's code and message.
func TestGatewayErrorIsToolError(t *testing.T) {
	t.Parallel()
	gw := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"code":"user_quota","message":"this user holds 5 sandboxes, the limit (max_sandboxes_per_user)"}}`))
	})
	srv := New(gw, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { srv.ServeThread(w, r, "t1") }))
	t.Cleanup(hs.Close)
	cs := connect(t, hs.URL)
	got, isErr := callTool(t, cs, "bash", map[string]any{"command": "echo hi"})
	if !isErr || !strings.Contains(got, "user_quota") || !strings.Contains(got, "max_sandboxes_per_user") {
		t.Fatalf("got %v %q", isErr, got)
	}
}

func TestTruncateBash(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 1000)
	for _, tc := range []struct {
		name, in string
		limit    int
		want     func(string) bool
	}{
		{"short kept", "abc", 10, func(s string) bool { return s == "abc" }},
		{"zero is off", long, 0, func(s string) bool { return s == long }},
		{"head and tail", "H" + long + "T", 200, func(s string) bool {
			return strings.HasPrefix(s, "Hé") && strings.HasSuffix(s, "éT") && strings.Contains(s, "[middle truncated: ") &&
				len([]rune(s)) <= 200
		}},
		{"exit marker kept", long + "\nExit Code: 7", 100, func(s string) bool {
			return strings.HasSuffix(s, "\nExit Code: 7") && len([]rune(s)) <= 100
		}},
		{"floor of 32", long, 5, func(s string) bool { return len([]rune(s)) == 32 }},
	} {
		if got := truncateBash(tc.in, tc.limit); !tc.want(got) {
			t.Errorf("%s: %q", tc.name, truncateRunes(got, 300))
		}
	}
}

func TestTruncateHead(t *testing.T) {
	t.Parallel()
	in := strings.Repeat("ü", 5000)
	got := truncateHead(in, 1000, "hint")
	if n := len([]rune(got)); n > 1000 || !strings.HasPrefix(got, "üü") ||
		!strings.HasSuffix(got, " of 5000 chars. hint] ...") {
		t.Fatalf("%d chars: %q", n, got[len(got)-80:])
	}
	if truncateHead("short", 1000, "hint") != "short" {
		t.Fatal("short output changed")
	}
}

func TestPathMatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, rel string
		want         bool
	}{
		{"*.py", "a.py", true},
		{"*.py", "src/deep/a.py", true},
		{"*.py", "a.pyc", false},
		{"src/*.py", "src/a.py", true},
		{"src/*.py", "src/x/a.py", false},
		{"src/**/*.py", "src/a.py", true},
		{"src/**/*.py", "src/x/y/a.py", true},
		{"**/*.py", "a.py", true},
		{"**", "a/b", true},
		{"src/**", "lib/a", false},
	} {
		if got := pathMatches(tc.pattern, tc.rel); got != tc.want {
			t.Errorf("pathMatches(%q, %q) = %v", tc.pattern, tc.rel, got)
		}
	}
	for rel, want := range map[string]bool{"node_modules/x.js": true, "a/b.log": true, "src/a.py": false, "pkg.egg-info/x": true} {
		if shouldIgnorePath(rel) != want {
			t.Errorf("shouldIgnorePath(%q) != %v", rel, want)
		}
	}
}

// Concurrent str_replace calls on one file never lose an edit: each
// replaces its own marker, and every one of them is in the file after.
func TestConcurrentStrReplaceLosesNoEdit(t *testing.T) {
	t.Parallel()
	cs, ws := newSession(t)
	const n = 16
	var markers []string
	for i := range n {
		markers = append(markers, fmt.Sprintf("<m%02d>", i))
	}
	if err := os.WriteFile(filepath.Join(ws, "shared.txt"), []byte(strings.Join(markers, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i, m := range markers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "str_replace", Arguments: map[string]any{
				"path": "/mnt/user-data/workspace/shared.txt", "old_str": m, "new_str": fmt.Sprintf("done%02d", i)}})
			if err != nil || res.IsError {
				errs <- fmt.Sprintf("%s: %v %+v", m, err, res)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	data, err := os.ReadFile(filepath.Join(ws, "shared.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if want := fmt.Sprintf("done%02d", i); !strings.Contains(string(data), want) {
			t.Errorf("edit %s lost; file:\n%s", want, data)
		}
	}
}
