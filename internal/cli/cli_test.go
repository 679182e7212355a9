package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// gatewayStub answers the admin API with fixed bodies and records what it
// was asked; the CLI's own behaviour (flags, exit codes, output) is under test.
func gatewayStub(t *testing.T) (*httptest.Server, *[]string) {
	t.Helper()
	var asked []string
	mux := http.NewServeMux()
	mux.HandleFunc("/admin/v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Method+" "+r.URL.String()+" "+r.Header.Get("Authorization"))
		_, _ = w.Write([]byte(`{"sandboxes":[{"sandbox_id":"0123456789abcdef","user":"alice","thread":"t1","backend":"process",` +
			`"template":"python","state":"active","created_at":"2020-01-01T00:00:00Z"},{"sandbox_id":"00112233aabbccdd","user":"bob",` +
			`"thread":"t2","backend":"process","state":"warm","created_at":"2020-01-01T00:00:00Z"}],"count":2,"fleet":"default"}`))
	})
	mux.HandleFunc("/admin/v1/sandboxes/00112233aabbccdd", func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Method+" "+r.URL.String())
		_, _ = w.Write([]byte(`{"sandbox_id":"00112233aabbccdd","user":"bob","thread":"t2","backend":"process","template":"node",` +
			`"state":"warm","created_at":"2020-01-01T00:00:00Z","alive":true}`))
	})
	mux.HandleFunc("/admin/v1/sandboxes/", func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Method+" "+r.URL.String())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no such sandbox"}}`))
	})
	mux.HandleFunc("/admin/v1/users/", func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Method+" "+r.URL.Path)
		_, _ = w.Write([]byte(`{"sandbox_destroyed":true,"data":"removed"}`))
	})
	mux.HandleFunc("/admin/v1/stats", func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Method+" "+r.URL.String())
		cpu := "1.0"
		if len(asked) > 1 {
			cpu = "1.5"
		}
		at := "2020-01-01T00:00:00Z"
		if len(asked) > 1 {
			at = "2020-01-01T00:00:01Z"
		}
		_, _ = w.Write([]byte(`{"supported":true,"count":1,"sandboxes":[{"sandbox_id":"0123456789abcdef","user":"alice","thread":"t1",` +
			`"backend":"process","state":"active","cpu_seconds":` + cpu + `,"memory_bytes":1572864,"pids":2,"at":"` + at + `"}]}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &asked
}

func run(t *testing.T, env map[string]string, stdin string, tty bool, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), Env{Args: args, Getenv: func(k string) string { return env[k] },
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, StdinTTY: tty,
		Version: Version{Version: "v1.2.3", Revision: "abc", Go: "go1.x"}})
	return code, out.String(), errb.String()
}

func TestExitCodesAndUsage(t *testing.T) {
	t.Parallel()
	srv, _ := gatewayStub(t)
	env := map[string]string{"SANDGATE_URL": srv.URL, "SANDGATE_TOKEN": "k"}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"ok", []string{"sandboxes", "ls"}, ExitOK, ""},
		{"help", []string{"sandboxes", "ls", "-h"}, ExitOK, "Usage: gateway sandboxes ls"},
		{"unknown flag", []string{"sandboxes", "ls", "--nope"}, ExitUsage, "flag provided but not defined: -nope\nRun 'gateway sandboxes ls -h' for usage."},
		{"bad output", []string{"sandboxes", "ls", "-o", "yaml"}, ExitUsage, `-o "yaml": want table or json`},
		{"stray argument", []string{"sandboxes", "ls", "x"}, ExitUsage, "takes no arguments"},
		{"no subcommand", []string{"sandboxes"}, ExitUsage, "want a subcommand"},
		{"unknown subcommand", []string{"sandboxes", "frob"}, ExitUsage, `unknown subcommand "frob"`},
		{"unknown threads subcommand", []string{"threads", "ls"}, ExitUsage, `unknown subcommand "ls"`},
		{"inspect without id", []string{"sandboxes", "inspect"}, ExitUsage, "at least one sandbox id"},
		{"logs with two ids", []string{"sandboxes", "logs", "a", "b"}, ExitUsage, "exactly one"},
		{"negative tail", []string{"sandboxes", "logs", "--tail", "-1", "a"}, ExitUsage, "--tail"},
		{"bad url", []string{"sandboxes", "ls", "--url", "ftp://x"}, ExitUsage, "--url"},
		{"not found", []string{"sandboxes", "inspect", "0123456789abcdef"}, ExitError, "no such sandbox (HTTP 404 not_found)"},
		{"destroy goes on past a failure", []string{"sandboxes", "destroy", "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"}, ExitError, "2 of 2 failed"},
		{"threads rm off a terminal", []string{"threads", "rm", "--user", "alice", "t1"}, ExitUsage, "confirm with -y"},
		{"threads rm without user", []string{"threads", "rm", "-y", "t1"}, ExitUsage, "--user is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, env, "", false, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.stderr)
			}
			if strings.Count(stderr, "flag provided") > 1 {
				t.Fatalf("error printed twice: %q", stderr)
			}
		})
	}
}

func TestListTableJSONAndFlags(t *testing.T) {
	t.Parallel()
	srv, asked := gatewayStub(t)
	// The flag overrides the environment, and flags may follow arguments.
	code, out, stderr := run(t, map[string]string{"SANDGATE_URL": "http://127.0.0.1:1", "SANDGATE_TOKEN": "env"}, "", false,
		"sandboxes", "ls", "--url", srv.URL, "--token", "flag", "--user", "alice", "--state", "active")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "SANDBOX ID") || !strings.Contains(lines[1], "0123456789abcdef   alice") ||
		strings.Contains(out, "\x1b[") {
		t.Fatalf("table:\n%s", out)
	}
	// The template's column: its name, or "-" for a sandbox of none.
	col := strings.Index(lines[0], "TEMPLATE")
	if col < 0 || !strings.HasPrefix(lines[1][col:], "python ") || !strings.HasPrefix(lines[2][col:], "-  ") {
		t.Fatalf("TEMPLATE column:\n%s", out)
	}
	if got := (*asked)[0]; got != "GET /admin/v1/sandboxes?state=active&user=alice Bearer flag" {
		t.Fatalf("asked %q", got)
	}
	_, out, _ = run(t, map[string]string{"SANDGATE_URL": srv.URL}, "", false, "sandboxes", "ls", "-o", "json")
	if !strings.Contains(out, "\"sandbox_id\": \"0123456789abcdef\"") || !strings.Contains(out, "\"count\": 2") ||
		!strings.Contains(out, "\"template\": \"python\"") {
		t.Fatalf("json:\n%s", out)
	}
}

func TestInspectShowsTemplate(t *testing.T) {
	t.Parallel()
	srv, _ := gatewayStub(t)
	code, out, stderr := run(t, map[string]string{"SANDGATE_URL": srv.URL}, "", false, "sandboxes", "inspect", "00112233aabbccdd")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !regexp.MustCompile(`(?m)^Backend:\s+process\nTemplate:\s+node\nState:\s+warm$`).MatchString(out) {
		t.Fatalf("inspect:\n%s", out)
	}
}

func TestTopComputesCPUPercent(t *testing.T) {
	t.Parallel()
	srv, _ := gatewayStub(t)
	code, out, stderr := run(t, map[string]string{"SANDGATE_URL": srv.URL}, "", false, "sandboxes", "top", "--once", "--interval", "1ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// 0.5 CPU seconds over 1 s of sample time: 50 %.
	if !strings.Contains(out, "50.0") || !strings.Contains(out, "1.5MiB") || !strings.Contains(out, "CPU %") {
		t.Fatalf("top:\n%s", out)
	}
}

func TestThreadsRmConfirmation(t *testing.T) {
	t.Parallel()
	srv, asked := gatewayStub(t)
	env := map[string]string{"SANDGATE_URL": srv.URL}
	code, _, stderr := run(t, env, "n\n", true, "threads", "rm", "--user", "alice", "t1")
	if code != ExitError || !strings.Contains(stderr, "[y/N]") || !strings.Contains(stderr, "nothing deleted") || len(*asked) != 0 {
		t.Fatalf("declined: exit %d %q, asked %v", code, stderr, *asked)
	}
	code, out, _ := run(t, env, "y\n", true, "threads", "rm", "--user", "alice", "t1")
	if code != 0 || len(*asked) != 1 || (*asked)[0] != "DELETE /admin/v1/users/alice/threads/t1" || !strings.Contains(out, "data: removed") {
		t.Fatalf("confirmed: exit %d %q, asked %v", code, out, *asked)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"status":"ok","version":"v9.9.9","revision":"def"}`))
	}))
	t.Cleanup(srv.Close)
	env := map[string]string{"SANDGATE_URL": srv.URL}
	// The flag forms are this binary's alone, offline.
	for _, arg := range []string{"--version", "-version"} {
		code, out, _ := run(t, env, "", false, arg)
		if code != 0 || out != "gateway v1.2.3 (revision abc) go1.x\n" {
			t.Errorf("%s: %d %q", arg, code, out)
		}
	}
	if hits.Load() != 0 {
		t.Errorf("--version asked the server")
	}
	// The command adds the server's (issue 40: it showed only the binary's).
	code, out, _ := run(t, env, "", false, "version")
	if code != 0 || out != "gateway v1.2.3 (revision abc) go1.x\nserver "+srv.URL+": gateway v9.9.9 (revision def)\n" {
		t.Errorf("version: %d %q", code, out)
	}
	if _, out, _ := run(t, env, "", false, "version", "-o", "json"); !strings.Contains(out, `"version": "v1.2.3"`) ||
		!strings.Contains(out, `"server": {`) || !strings.Contains(out, `"version": "v9.9.9"`) {
		t.Errorf("version -o json: %q", out)
	}
	// No server: the binary's version all the same, the failure on stderr.
	code, out, stderr := run(t, map[string]string{"SANDGATE_URL": "http://127.0.0.1:1"}, "", false, "version")
	if code != 0 || out != "gateway v1.2.3 (revision abc) go1.x\n" || !strings.Contains(stderr, "server at http://127.0.0.1:1") {
		t.Errorf("version without a server: %d %q %q", code, out, stderr)
	}
	if v := BuildVersion("", ""); v.Version == "" || v.Go == "" {
		t.Errorf("unstamped: %+v", v)
	}
	if v := BuildVersion("v1", "r"); v.Version != "v1" || v.Revision != "r" {
		t.Errorf("stamped: %+v", v)
	}
}

func TestFormatting(t *testing.T) {
	t.Parallel()
	now := time.Date(2020, 1, 3, 0, 0, 0, 0, time.UTC)
	for since, want := range map[time.Time]string{
		{}:                         "-",
		now.Add(-30 * time.Second): "30s",
		now.Add(-5 * time.Minute):  "5m",
		now.Add(-3 * time.Hour):    "3h",
		now.Add(-72 * time.Hour):   "3d",
	} {
		if got := age(since, now); got != want {
			t.Errorf("age(%v) = %q, want %q", since, got, want)
		}
	}
	for n, want := range map[int64]string{512: "512B", 1536: "1.5KiB", 3 << 20: "3.0MiB", 5 << 30: "5.0GiB"} {
		if got := bytesIEC(n); got != want {
			t.Errorf("bytesIEC(%d) = %q, want %q", n, got, want)
		}
	}
}
