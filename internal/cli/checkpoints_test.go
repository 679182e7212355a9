package cli

import (
	"cmp"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/internal/api"
)

const (
	ck1 = "ck-1700000000000-0a1b2c"
	ck2 = "ck-1700000005000-3d4e5f"
)

// threadsStub answers the /threads routes of checkpoints, fork, freeze and
// create, and /api/templates, with the gateway's shapes and records each
// request as "METHOD path body"; thread "busy" runs a command and "nokey"
// needs a credential.
func threadsStub(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var asked []string
	cp := func(id, label string) string {
		return `{"id":"` + id + `","label":"` + label + `","created_at":"2020-01-01T00:00:00Z","size":1536,"files":3,` +
			`"linked":2,"skipped":0,"method":"reflink"}`
	}
	answer := func(w http.ResponseWriter, status int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		asked = append(asked, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+string(body)))
		mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/threads/nokey/") {
			answer(w, http.StatusUnauthorized, `{"error":{"code":"unauthorized","message":"missing or invalid credentials"}}`)
			return
		}
		if len(body) > 0 && r.Header.Get("Content-Type") != "application/json" {
			answer(w, http.StatusUnsupportedMediaType, `{"error":{"code":"bad_request","message":"not JSON"}}`)
			return
		}
		switch r.Method + " " + r.URL.Path {
		case "POST /threads/t1/checkpoints":
			answer(w, http.StatusCreated, strings.Replace(cp(ck2, "before"), `"skipped":0`, `"skipped":1`, 1))
		case "GET /threads/t1/checkpoints":
			answer(w, http.StatusOK, `{"thread":"t1","method":"reflink","checkpoints":[`+cp(ck2, "before")+`,`+cp(ck1, "")+`]}`)
		case "DELETE /threads/t1/checkpoints/" + ck1:
			w.WriteHeader(http.StatusNoContent)
		case "POST /threads/busy/checkpoints/" + ck1 + "/restore":
			if !strings.Contains(string(body), `"force":true`) {
				answer(w, http.StatusConflict, `{"error":{"code":"sandbox_busy","message":"the sandbox is running a command or serving a request; retry when it is idle (restore: or force)"}}`)
				return
			}
			answer(w, http.StatusOK, `{"thread":"busy","restored":`+cp(ck1, "before")+`}`)
		case "POST /threads/t1/fork":
			answer(w, http.StatusCreated, `{"sandbox_id":"00112233aabbccdd","thread":"t2","user":"alice","backend":"process","state":"active",`+
				`"outcome":"created","url":"http://gw/sandboxes/00112233aabbccdd","sandbox_url":"http://gw/c/SECRETCAP","created_at":"2020-01-01T00:00:00Z"}`)
		case "GET /api/templates":
			answer(w, http.StatusOK, `{"default":"python","templates":[{"name":"python","default":true,"image":"python:3.12",`+
				`"memory":536870912,"max_memory":2147483648,"env_names":["PIP_INDEX_URL"],"prewarm":2},{"name":"minimal","default":false}]}`)
		case "PUT /threads/t1/sandbox":
			var req api.CreateSandbox
			if len(body) > 0 && json.Unmarshal(body, &req) != nil {
				answer(w, http.StatusBadRequest, `{"error":{"code":"bad_request","message":"not JSON"}}`)
				return
			}
			switch {
			case req.Template != "" && req.Template != "python" && req.Template != "minimal":
				answer(w, http.StatusBadRequest, `{"error":{"code":"bad_request","field":"template",`+
					`"message":"template: template not configured: \"`+req.Template+`\" (GET /api/templates lists them)"}}`)
				return
			case req.Memory > 2<<30:
				answer(w, http.StatusForbidden, `{"error":{"code":"forbidden","field":"memory",`+
					`"message":"memory: `+strconv.FormatInt(req.Memory, 10)+` bytes exceeds the template's ceiling of 2147483648"}}`)
				return
			}
			answer(w, http.StatusOK, `{"sandbox_id":"8899aabbccddeeff","thread":"t1","user":"alice","backend":"process",`+
				`"template":"`+cmp.Or(req.Template, "python")+`","state":"active","outcome":"cold","url":"http://gw/sandboxes/8899aabbccddeeff",`+
				`"sandbox_url":"http://gw/c/SECRETCAP","created_at":"2020-01-01T00:00:00Z"}`)
		case "POST /threads/t1/sandbox/freeze":
			answer(w, http.StatusOK, `{"thread":"t1","frozen":true}`)
		default:
			answer(w, http.StatusNotFound, `{"error":{"code":"checkpoint_not_found","message":"no such checkpoint, or the thread has no workspace yet"}}`)
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), asked...)
	}
}

// TestThreadCommands: each thread command's request (method, path, JSON
// body) and its output for people and for scripts, failures included.
func TestThreadCommands(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		asked  []string
		stdout []string // substrings, in order
		stderr []string
		not    string // must not be printed anywhere
	}{
		{name: "create", args: []string{"checkpoint", "create", "t1", "--label", "before"}, asked: []string{`POST /threads/t1/checkpoints {"label":"before"}`},
			stdout: []string{"CHECKPOINT ID", "LABEL", "SIZE", "FILES", "LINKED", "METHOD", ck2, "before", "1.5KiB", "3", "2", "reflink"},
			stderr: []string{"left 1 special files (sockets, devices) out of the checkpoint"}},
		{name: "create without label", args: []string{"checkpoints", "create", "-o", "json", "t1"}, asked: []string{`POST /threads/t1/checkpoints {"label":""}`},
			stdout: []string{`"id": "` + ck2 + `"`, `"size": 1536`, `"method": "reflink"`}},
		{name: "ls", args: []string{"checkpoint", "ls", "t1"}, asked: []string{"GET /threads/t1/checkpoints"},
			stdout: []string{"CHECKPOINT ID", ck2 + "   before", ck1 + "   -"}},
		{name: "ls json", args: []string{"checkpoint", "list", "t1", "-o", "json"}, asked: []string{"GET /threads/t1/checkpoints"},
			stdout: []string{`"thread": "t1"`, `"method": "reflink"`, `"checkpoints": [`, ck2, ck1}},
		{name: "restore busy", args: []string{"checkpoint", "restore", "busy", ck1}, code: ExitError,
			asked:  []string{`POST /threads/busy/checkpoints/` + ck1 + `/restore {"force":false}`},
			stderr: []string{"gateway: the sandbox is running a command", "(HTTP 409 sandbox_busy)", "\nRun again with --force"}},
		{name: "restore forced", args: []string{"checkpoint", "restore", "--force", "busy", ck1},
			asked:  []string{`POST /threads/busy/checkpoints/` + ck1 + `/restore {"force":true}`},
			stdout: []string{"busy: restored checkpoint " + ck1 + " (before)\n"}},
		{name: "restore unknown", args: []string{"checkpoint", "restore", "t1", ck2}, code: ExitError,
			stderr: []string{"no such checkpoint, or the thread has no workspace yet (HTTP 404 checkpoint_not_found)"}},
		{name: "rm goes on past a failure", args: []string{"checkpoint", "rm", "t1", ck2, ck1}, code: ExitError,
			asked:  []string{"DELETE /threads/t1/checkpoints/" + ck2, "DELETE /threads/t1/checkpoints/" + ck1},
			stdout: []string{ck1 + "\n"}, stderr: []string{"gateway: " + ck2 + ": no such checkpoint", "1 of 2 failed"}},
		{name: "rm json", args: []string{"checkpoint", "rm", "-o", "json", "t1", ck1},
			stdout: []string{`"deleted": [`, ck1, `"thread": "t1"`}},
		{name: "fork", args: []string{"fork", "t1", "t2", "--checkpoint", ck1},
			asked:  []string{`POST /threads/t1/fork {"checkpoint":"` + ck1 + `","thread":"t2"}`},
			stdout: []string{"Thread:", "t2", "Forked from:", "t1 (checkpoint " + ck1 + ")", "Sandbox ID:", "00112233aabbccdd", "State:", "active"},
			not:    "SECRETCAP"},
		{name: "fork current workspace", args: []string{"fork", "t1", "t2"}, asked: []string{`POST /threads/t1/fork {"thread":"t2"}`},
			stdout: []string{"t1 (its current workspace)"}},
		{name: "fork json has the capability", args: []string{"fork", "-o", "json", "t1", "t2"}, stdout: []string{`"sandbox_url": "http://gw/c/SECRETCAP"`}},
		{name: "freeze", args: []string{"freeze", "t1"}, asked: []string{"POST /threads/t1/sandbox/freeze"}, stdout: []string{"t1: frozen\n"}},
		{name: "freeze json", args: []string{"freeze", "t1", "-o", "json"}, stdout: []string{`"frozen": true`}},
		{name: "templates", args: []string{"templates"}, asked: []string{"GET /api/templates"},
			stdout: []string{"NAME", "DEFAULT", "IMAGE", "MEMORY", "MAX MEMORY", "PREWARM\n",
				"python", "yes", "python:3.12", "512.0MiB", "2.0GiB", "2\n", "minimal", "no", "-", "-", "-", "0\n"}},
		{name: "templates ls json", args: []string{"templates", "ls", "-o", "json"}, asked: []string{"GET /api/templates"},
			stdout: []string{`"default": "python"`, `"name": "python"`, `"max_memory": 2147483648`, `"env_names": [`, `"name": "minimal"`}},
		{name: "create with options", args: []string{"threads", "create", "t1", "--template", "minimal", "--env", "A=1", "--env", "B=x=y",
			"--memory", "512m", "--meta", "owner=ci"},
			asked:  []string{`PUT /threads/t1/sandbox {"template":"minimal","env":{"A":"1","B":"x=y"},"memory":536870912,"metadata":{"owner":"ci"}}`},
			stdout: []string{"Thread:", "t1", "Sandbox ID:", "8899aabbccddeeff", "Template:", "minimal", "State:", "active"},
			not:    "SECRETCAP"},
		{name: "create without options keeps the stored ones", args: []string{"threads", "create", "t1", "--timeout", "5s"},
			asked: []string{"PUT /threads/t1/sandbox"}, stdout: []string{"Template:", "python"}},
		{name: "create resetting to the default", args: []string{"threads", "create", "--template", "", "t1"},
			asked: []string{"PUT /threads/t1/sandbox {}"}},
		{name: "create json has the capability", args: []string{"threads", "create", "-o", "json", "t1", "--meta", "k="},
			asked:  []string{`PUT /threads/t1/sandbox {"metadata":{"k":""}}`},
			stdout: []string{`"template": "python"`, `"sandbox_url": "http://gw/c/SECRETCAP"`}},
		{name: "create refused names the field", args: []string{"threads", "create", "t1", "--template", "nope"}, code: ExitError,
			stderr: []string{`gateway: template: template not configured: "nope"`, "(HTTP 400 bad_request)"}},
		{name: "create past the ceiling", args: []string{"threads", "create", "t1", "--memory", "4g"}, code: ExitError,
			asked:  []string{`PUT /threads/t1/sandbox {"memory":4294967296}`},
			stderr: []string{"gateway: memory: 4294967296 bytes exceeds the template's ceiling of 2147483648 (HTTP 403 forbidden)"}},
		{name: "unauthorized names the user's credential", args: []string{"freeze", "nokey"}, code: ExitError,
			stderr: []string{"set SANDGATE_TOKEN or --token to a credential of the thread's user"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, asked := threadsStub(t)
			code, stdout, stderr := run(t, map[string]string{"SANDGATE_URL": srv.URL}, "", false, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tc.code, stdout, stderr)
			}
			if tc.asked != nil && strings.Join(asked(), "\n") != strings.Join(tc.asked, "\n") {
				t.Errorf("asked %q, want %q", asked(), tc.asked)
			}
			for out, want := range map[string][]string{stdout: tc.stdout, stderr: tc.stderr} {
				rest := out
				for _, w := range want {
					i := strings.Index(rest, w)
					if i < 0 {
						t.Errorf("output %q lacks %q (in order)", out, w)
						break
					}
					rest = rest[i+len(w):]
				}
			}
			if tc.not != "" && strings.Contains(stdout+stderr, tc.not) {
				t.Errorf("printed %q: %q", tc.not, stdout+stderr)
			}
		})
	}
}

func TestThreadCommandUsage(t *testing.T) {
	t.Parallel()
	srv, asked := threadsStub(t)
	env := map[string]string{"SANDGATE_URL": srv.URL}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no subcommand", []string{"checkpoint"}, ExitUsage, "checkpoint: want a subcommand: create, ls, restore, rm"},
		{"help lists the thread commands", []string{"checkpoint", "-h"}, ExitOK, "gateway fork THREAD NEW_THREAD [--checkpoint ID]"},
		{"unknown subcommand", []string{"checkpoint", "frob"}, ExitUsage, `unknown subcommand "frob"`},
		{"create without thread", []string{"checkpoint", "create"}, ExitUsage, "want exactly one thread id\nRun 'gateway checkpoint create -h' for usage."},
		{"create help", []string{"checkpoint", "create", "-h"}, ExitOK, "Usage: gateway checkpoint create THREAD [--label L]"},
		{"ls with two threads", []string{"checkpoint", "ls", "a", "b"}, ExitUsage, "want exactly one thread id"},
		{"restore without id", []string{"checkpoint", "restore", "t1"}, ExitUsage, "want a thread id and a checkpoint id"},
		{"rm without id", []string{"checkpoint", "rm", "t1"}, ExitUsage, "at least one checkpoint id"},
		{"fork without new thread", []string{"fork", "t1"}, ExitUsage, "want a thread id and the new thread's id"},
		{"fork help", []string{"fork", "-h"}, ExitOK, "--checkpoint"},
		{"freeze without thread", []string{"freeze"}, ExitUsage, "want exactly one thread id"},
		{"freeze bad output", []string{"freeze", "t1", "-o", "yaml"}, ExitUsage, `-o "yaml": want table or json`},
		{"help lists the template commands", []string{"threads", "-h"}, ExitOK,
			"gateway templates [ls]\n  gateway threads create THREAD [--template NAME] [--env K=V]... [--memory 512m] [--meta K=V]..."},
		{"threads without subcommand", []string{"threads"}, ExitUsage, "threads: want a subcommand: create, rm"},
		{"templates with an argument", []string{"templates", "python"}, ExitUsage, `templates takes no arguments (got "python")`},
		{"create without thread", []string{"threads", "create", "--template", "python"}, ExitUsage, "threads create: want exactly one thread id"},
		{"create help", []string{"threads", "create", "-h"}, ExitOK, "Usage: gateway threads create THREAD [--template NAME]"},
		{"env without value", []string{"threads", "create", "t1", "--env", "A"}, ExitUsage, `invalid value "A" for flag -env: want KEY=VALUE, got "A"`},
		{"meta without key", []string{"threads", "create", "t1", "--meta", "=v"}, ExitUsage, "want KEY=VALUE"},
		{"bad memory", []string{"threads", "create", "t1", "--memory", "lots"}, ExitUsage, `--memory "lots": want a positive size such as 512m or 2g`},
		{"zero memory", []string{"threads", "create", "t1", "--memory", "0"}, ExitUsage, "--memory"},
	} {
		code, _, stderr := run(t, env, "", false, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tc.name, code, stderr, tc.code, tc.stderr)
		}
	}
	if got := asked(); len(got) != 0 {
		t.Errorf("usage errors reached the gateway: %q", got)
	}
	for _, c := range []string{"checkpoint", "checkpoints", "fork", "freeze", "templates"} {
		if !IsCommand(c) {
			t.Errorf("IsCommand(%q) = false", c)
		}
	}
}
