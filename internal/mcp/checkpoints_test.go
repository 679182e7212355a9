package mcp

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/internal/checkpoint"
	sandboxsrv "github.com/sandgate/sandgate/internal/sandbox"
)

// requests records what a stand-in gateway's control routes were asked:
// "METHOD path body".
type requests struct {
	mu  sync.Mutex
	all []string
}

func (q *requests) add(r *http.Request) []byte {
	body, _ := io.ReadAll(r.Body)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.all = append(q.all, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+string(body)))
	return body
}

func (q *requests) list() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.all...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeCode(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// newCheckpointSession serves thread t1's MCP endpoint over a stand-in
// gateway: a real sandbox server on t1's user-data directory for
// /threads/t1/v1/..., and the thread's checkpoint and fork routes on the
// real checkpoint store, in the router's JSON shapes. busy makes the
// sandbox run a command as far as restore is concerned.
func newCheckpointSession(t *testing.T) (cs *sdk.ClientSession, threads *checkpoint.Threads, asked *requests, busy *atomic.Bool) {
	t.Helper()
	dataDir := t.TempDir()
	threads, err := checkpoint.NewThreads(dataDir, checkpoint.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var maps []sandboxsrv.Mapping
	for _, sub := range []string{"workspace", "uploads", "outputs"} {
		host := filepath.Join(threads.Workspace("u", "t1"), sub)
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

	asked, busy = &requests{}, &atomic.Bool{}
	hold := func(fn func() error) error { return fn() }
	fail := func(w http.ResponseWriter, err error) {
		switch {
		case errors.Is(err, checkpoint.ErrNotFound):
			writeCode(w, http.StatusNotFound, "checkpoint_not_found", "no such checkpoint, or the thread has no workspace yet")
		case errors.Is(err, checkpoint.ErrNotEmpty):
			writeCode(w, http.StatusConflict, "thread_exists", "the fork's thread already has a sandbox or files; fork onto a new thread")
		case errors.Is(err, checkpoint.ErrBadID):
			writeCode(w, http.StatusBadRequest, "bad_request", err.Error())
		default:
			writeCode(w, http.StatusInternalServerError, "internal", err.Error())
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/threads/t1/v1/", http.StripPrefix("/threads/t1", sb.Handler()))
	mux.HandleFunc("POST /threads/t1/checkpoints", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Label string }
		_ = json.Unmarshal(asked.add(r), &req)
		info, err := threads.Create(r.Context(), "u", "t1", req.Label, hold)
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, info)
	})
	mux.HandleFunc("GET /threads/t1/checkpoints", func(w http.ResponseWriter, r *http.Request) {
		asked.add(r)
		list, err := threads.List(r.Context(), "u", "t1")
		if err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"thread": "t1", "method": threads.Method(), "checkpoints": list})
	})
	mux.HandleFunc("POST /threads/t1/checkpoints/{id}/restore", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Force bool }
		_ = json.Unmarshal(asked.add(r), &req)
		// The router's order: the checkpoint is looked up, then the
		// sandbox held (409 when busy, unless forced).
		info, err := threads.Get(r.Context(), "u", "t1", r.PathValue("id"))
		if err != nil {
			fail(w, err)
			return
		}
		if busy.Load() && !req.Force {
			writeCode(w, http.StatusConflict, "sandbox_busy", "the sandbox is running a command or serving a request; retry when it is idle (restore: or force)")
			return
		}
		if err := threads.Restore(r.Context(), "u", "t1", r.PathValue("id"), hold); err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"thread": "t1", "restored": info})
	})
	mux.HandleFunc("POST /threads/t1/fork", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Thread, Checkpoint string }
		_ = json.Unmarshal(asked.add(r), &req)
		if err := threads.Fork(r.Context(), "u", "t1", req.Thread, req.Checkpoint, hold, hold); err != nil {
			fail(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, map[string]any{"sandbox_id": "5f0c6e1d2b3a4958", "thread": req.Thread, "user": "u",
			"state": "active", "sandbox_url": "http://gw/c/capability"})
	})
	srv := New(mux, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { srv.ServeThread(w, r, "t1") }))
	t.Cleanup(hs.Close)
	return connect(t, hs.URL), threads, asked, busy
}

// TestCheckpointTools: an agent's undo through the tools, on the real
// checkpoint store and a real sandbox: write, checkpoint, break things,
// restore (refused while busy unless forced), fork from the checkpoint.
func TestCheckpointTools(t *testing.T) {
	t.Parallel()
	cs, threads, asked, busy := newCheckpointSession(t)
	const w = "/mnt/user-data/workspace"
	must := func(tool string, args map[string]any, wantErr bool, want ...string) string {
		t.Helper()
		got, isErr := callTool(t, cs, tool, args)
		if isErr != wantErr {
			t.Fatalf("%s %v: isError %v, want %v: %q", tool, args, isErr, wantErr, got)
		}
		rest := got
		for _, s := range want {
			i := strings.Index(rest, s)
			if i < 0 {
				t.Fatalf("%s %v: %q lacks %q (in order)", tool, args, got, s)
			}
			rest = rest[i+len(s):]
		}
		return got
	}

	must("list_checkpoints", nil, false, "No checkpoints of thread t1 yet. Use checkpoint to make one.")
	must("write_file", map[string]any{"path": w + "/app.py", "content": "print('v1')\n"}, false, "OK")
	created := must("checkpoint", map[string]any{"label": "before refactor"}, false,
		"Created checkpoint ck-", ` ("before refactor"): 1 files, 12 bytes, copied by `+string(threads.Method()), "restore_checkpoint with id ck-")
	id := regexp.MustCompile(`ck-\d{13}-[0-9a-f]{6}`).FindString(created)
	if id == "" {
		t.Fatalf("no id in %q", created)
	}

	must("write_file", map[string]any{"path": w + "/app.py", "content": "broken\n"}, false, "OK")
	must("write_file", map[string]any{"path": w + "/new.txt", "content": "x"}, false, "OK")
	must("list_checkpoints", nil, false, "1 checkpoints of thread t1, newest first:\n1. "+id+" 20", `Z ("before refactor"): 1 files, 12 bytes`)

	busy.Store(true)
	must("restore_checkpoint", map[string]any{"id": id}, true, "a command is still running", "nothing was restored", "force=true")
	must("read_file", map[string]any{"path": w + "/app.py"}, false, "broken")
	must("restore_checkpoint", map[string]any{"id": id, "force": true}, false,
		"Restored checkpoint "+id+` ("before refactor"), made 20`, "every change since is undone")
	if got, _ := callTool(t, cs, "read_file", map[string]any{"path": w + "/app.py"}); got != "print('v1')\n" {
		t.Fatalf("after restore: %q", got)
	}
	must("read_file", map[string]any{"path": w + "/new.txt"}, true, "File not found")

	must("fork_thread", map[string]any{"thread": "t2", "checkpoint": id}, false,
		"Forked thread t1 (checkpoint "+id+") into thread t2: sandbox 5f0c6e1d2b3a4958, active.", "/threads/t2/mcp")
	if data, err := os.ReadFile(filepath.Join(threads.Workspace("u", "t2"), "workspace", "app.py")); err != nil || string(data) != "print('v1')\n" {
		t.Fatalf("fork's file: %q %v", data, err)
	}
	must("fork_thread", map[string]any{"thread": "t2"}, true, "thread t2 already exists", "fork onto a new thread id")
	must("restore_checkpoint", map[string]any{"id": "ck-0000000000000-000000"}, true, "this thread has no checkpoint ck-0000000000000-000000")
	must("restore_checkpoint", map[string]any{"id": ""}, true, "id is required")
	must("fork_thread", map[string]any{"thread": ""}, true, "thread is required")

	want := []string{
		"GET /threads/t1/checkpoints",
		`POST /threads/t1/checkpoints {"label":"before refactor"}`,
		"GET /threads/t1/checkpoints",
		"POST /threads/t1/checkpoints/" + id + `/restore {"force":false}`,
		"POST /threads/t1/checkpoints/" + id + `/restore {"force":true}`,
		`POST /threads/t1/fork {"checkpoint":"` + id + `","thread":"t2"}`,
		`POST /threads/t1/fork {"thread":"t2"}`,
		`POST /threads/t1/checkpoints/ck-0000000000000-000000/restore {"force":false}`,
	}
	if got := asked.list(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("asked:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The checkpoint tools go to the thread's control-plane routes with the
// caller's credential; the gateway's refusals are tool errors that say
// what to do, and any other names the gateway's code.
func TestCheckpointToolErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		tool       string
		args       map[string]any
		status     int
		code, msg  string
		wantPath   string
		wantErrors []string
	}{
		{"no files yet", "checkpoint", nil, 404, "not_found", "no such thread: it has no workspace yet",
			"POST /threads/t1/checkpoints", []string{"this thread has no files yet, so there is nothing to checkpoint"}},
		{"no files yet, older gateway", "checkpoint", nil, 404, "checkpoint_not_found", "no such checkpoint, or the thread has no workspace yet",
			"POST /threads/t1/checkpoints", []string{"this thread has no files yet, so there is nothing to checkpoint"}},
		{"fork with no files", "fork_thread", map[string]any{"thread": "t2"}, 404, "not_found", "no such thread: it has no workspace yet",
			"POST /threads/t1/fork", []string{"this thread has no files yet, so there is nothing to fork"}},
		{"backend without checkpoints", "list_checkpoints", nil, 501, "not_supported", "checkpoints need thread data on the gateway host",
			"GET /threads/t1/checkpoints", []string{"checkpoints and forks are not available on this gateway"}},
		{"fork of nothing", "fork_thread", map[string]any{"thread": "t2"}, 404, "checkpoint_not_found", "no such checkpoint",
			"POST /threads/t1/fork", []string{"this thread has no files yet, so there is nothing to fork"}},
		{"fork onto a denied thread", "fork_thread", map[string]any{"thread": "other"}, 403, "forbidden", "this credential may not open this thread",
			"POST /threads/t1/fork", []string{"Error: forking the thread failed: this credential may not open this thread (forbidden)"}},
		{"bad id", "restore_checkpoint", map[string]any{"id": "nope"}, 400, "bad_request", "invalid checkpoint id",
			"POST /threads/t1/checkpoints/nope/restore", []string{"restoring the checkpoint failed: invalid checkpoint id (bad_request)"}},
		{"quota", "checkpoint", map[string]any{"label": "x"}, 429, "user_quota", "this user holds 5 sandboxes",
			"POST /threads/t1/checkpoints", []string{"creating a checkpoint failed: this user holds 5 sandboxes (user_quota)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			asked := &requests{}
			var auth atomic.Value
			gw := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				asked.add(r)
				auth.Store(r.Header.Get("Authorization"))
				writeCode(w, tc.status, tc.code, tc.msg)
			})
			srv := New(gw, nil)
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { srv.ServeThread(w, r, "t1") }))
			t.Cleanup(hs.Close)
			got, isErr := callTool(t, connectAs(t, hs.URL, "Bearer user-key"), tc.tool, tc.args)
			if !isErr {
				t.Fatalf("not a tool error: %q", got)
			}
			for _, w := range tc.wantErrors {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			if a := asked.list(); len(a) != 1 || !strings.HasPrefix(a[0], tc.wantPath) {
				t.Errorf("asked %q, want %s", a, tc.wantPath)
			}
			if a, _ := auth.Load().(string); a != "Bearer user-key" {
				t.Errorf("Authorization %q: the caller's credential was not passed on", a)
			}
		})
	}
}

type bearer struct{ value string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.value)
	return http.DefaultTransport.RoundTrip(r)
}
