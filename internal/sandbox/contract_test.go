package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// recorder keeps every JSON answer of the server with the route pattern
// that served it.
type recorder struct {
	mu   sync.Mutex
	seen []recorded
}

type recorded struct {
	endpoint string // "METHOD /pattern", as registered
	status   int
	body     []byte
}

func (rec *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &captureWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(cw, r)
		if !strings.HasPrefix(cw.Header().Get("Content-Type"), "application/json") {
			return // downloads, SSE, WebSocket
		}
		rec.mu.Lock()
		rec.seen = append(rec.seen, recorded{endpoint: r.Pattern, status: cw.status, body: cw.buf.Bytes()})
		rec.mu.Unlock()
	})
}

type captureWriter struct {
	http.ResponseWriter
	status int
	buf    bytes.Buffer
}

func (c *captureWriter) WriteHeader(code int) {
	c.status = code
	c.ResponseWriter.WriteHeader(code)
}

func (c *captureWriter) Write(b []byte) (int, error) {
	c.buf.Write(b)
	return c.ResponseWriter.Write(b)
}

// TestAIOContract drives every /v1 JSON endpoint through success and error
// answers and checks each answer against the AIO 1.9.4 schema (required
// fields and types, per endpoint); a failure names endpoint and field. It
// also fails when an endpoint in the table was not exercised both ways, or
// the server registers one the table lacks.
func TestAIOContract(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	rec := &recorder{}
	hs := httptest.NewServer(rec.wrap(ts.srv.Handler()))
	t.Cleanup(hs.Close)
	c := &testServer{Server: hs, srv: ts.srv}
	ws := vWorkspace

	c.do(t, http.MethodGet, "/v1/sandbox", nil)
	for _, call := range contractCalls(ws) {
		c.do(t, call.method, call.path, call.body)
	}
	// resuming a stream (sse.go): from a command's start, a malformed id, an unknown command
	var ran struct {
		CommandID string `json:"command_id"`
	}
	_ = json.Unmarshal(c.do(t, http.MethodPost, "/v1/shell/exec", map[string]any{"command": "echo again"}).Data, &ran)
	for _, id := range []string{ran.CommandID + ":0", "not-an-id", "0123abcd:0"} {
		c.send(t, http.MethodPost, "/v1/shell/exec", http.Header{"Content-Type": {"application/json"}, "Last-Event-ID": {id}},
			strings.NewReader(`{"command":"echo again"}`))
	}
	// upload: success and a refused destination
	for _, dest := range []string{ws + "/up.txt", "/etc/up.txt"} {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		_ = mw.WriteField("path", dest)
		fw, _ := mw.CreateFormFile("file", "up.txt")
		_, _ = fw.Write([]byte("uploaded"))
		_ = mw.Close()
		c.send(t, http.MethodPost, "/v1/file/upload", http.Header{"Content-Type": {mw.FormDataContentType()}}, &buf)
	}

	if r := c.do(t, http.MethodPost, "/v1/no/such", map[string]any{}); r.Status != http.StatusNotFound {
		t.Errorf("unknown endpoint: %d", r.Status)
	} else if err := checkResponse("POST /v1/no/such", r.Status, []byte(r.Body)); err != nil {
		t.Errorf("contract: %v", err)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	okSeen, errSeen := map[string]bool{}, map[string]bool{}
	answers := map[string][]string{} // each endpoint's answers, to say why one was not exercised
	for _, r := range rec.seen {
		if r.endpoint == "/" {
			continue // unknown path: checked below as the 404 shape
		}
		if _, known := aioEndpoints[r.endpoint]; !known {
			t.Errorf("%s is served but has no entry in aioEndpoints", r.endpoint)
			continue
		}
		if err := checkResponse(r.endpoint, r.status, r.body); err != nil {
			t.Errorf("contract: %v\nbody: %s", err, r.body)
		}
		answers[r.endpoint] = append(answers[r.endpoint], fmt.Sprintf("%d %.200s", r.status, r.body))
		if r.status == http.StatusOK {
			okSeen[r.endpoint] = true
		} else {
			errSeen[r.endpoint] = true
		}
	}
	for _, ep := range sortedKeys(aioEndpoints) {
		if !strings.HasPrefix(ep, "POST ") && ep != "DELETE /v1/shell/sessions/{session_id}" {
			errSeen[ep] = true // no input, no failing answer
		}
		if !okSeen[ep] || !errSeen[ep] {
			t.Errorf("%s: not exercised (success seen %v, error seen %v); answers: %q", ep, okSeen[ep], errSeen[ep], answers[ep])
		}
	}
}

type contractCall struct {
	method, path string
	body         any
}

// contractCalls is one success and at least one failure per endpoint.
func contractCalls(ws string) []contractCall {
	post := func(path string, body any) contractCall { return contractCall{http.MethodPost, path, body} }
	calls := []contractCall{
		post("/v1/shell/exec", map[string]any{"command": "echo hi"}),
		post("/v1/shell/sessions/create", map[string]any{"id": "bg"}),
		post("/v1/shell/exec", map[string]any{"command": "sleep 5", "async_mode": true, "id": "bg"}),
		post("/v1/shell/exec", map[string]any{}),
		post("/v1/shell/exec", map[string]any{"command": "true", "timeout": "soon"}),
		post("/v1/shell/exec", map[string]any{"command": "true", "id": "missing"}),
		post("/v1/shell/view", map[string]any{"id": "bg"}),
		post("/v1/shell/view", map[string]any{"id": "missing"}),
		post("/v1/shell/view", map[string]any{}),
		post("/v1/shell/kill", map[string]any{"id": "bg"}),
		post("/v1/shell/kill", map[string]any{"id": "missing"}),
		post("/v1/shell/sessions/create", map[string]any{"id": "s1"}),
		post("/v1/shell/sessions/create", map[string]any{"exec_dir": "/etc"}),
		{http.MethodDelete, "/v1/shell/sessions/s1", nil},
		{http.MethodDelete, "/v1/shell/sessions/s1", nil},
		post("/v1/bash/exec", map[string]any{"command": "echo out; echo err >&2", "env": map[string]any{"A": "b"}}),
		post("/v1/bash/exec", map[string]any{"command": "sleep 5", "hard_timeout": 0.05}),
		post("/v1/bash/exec", map[string]any{"command": "sleep 5", "async_mode": true}),
		post("/v1/bash/exec", map[string]any{"command": ""}),
		post("/v1/bash/exec", map[string]any{"command": "true", "session_id": "missing"}),
		post("/v1/shell/sessions/create", map[string]any{"id": "io"}),
		post("/v1/shell/exec", map[string]any{"id": "io", "command": "read x; echo got $x", "async_mode": true}),
		{http.MethodGet, "/v1/shell/sessions", nil},
		{http.MethodGet, "/v1/shell/sessions/stats", nil},
		post("/v1/shell/write", map[string]any{"id": "io", "input": "line", "press_enter": true}),
		post("/v1/shell/write", map[string]any{"id": "io", "input": "line"}),
		post("/v1/shell/write", map[string]any{"id": "missing", "input": "x", "press_enter": true}),
		post("/v1/shell/wait", map[string]any{"id": "io", "seconds": 10}),
		post("/v1/shell/wait", map[string]any{"id": "missing"}),
		post("/v1/shell/write", map[string]any{"id": "io", "input": "late", "press_enter": true}), // ended: 409
		post("/v1/bash/sessions/create", map[string]any{"session_id": "b1"}),
		post("/v1/bash/sessions/create", map[string]any{"exec_dir": "/etc"}),
		{http.MethodGet, "/v1/bash/sessions", nil},
		post("/v1/bash/exec", map[string]any{"session_id": "b1", "command": "read x; echo out $x; echo err >&2", "async_mode": true}),
		post("/v1/bash/write", map[string]any{"session_id": "b1", "input": "in\n"}),
		post("/v1/bash/write", map[string]any{"session_id": "b1"}),
		post("/v1/bash/output", map[string]any{"session_id": "b1", "wait": true, "wait_timeout": 10}),
		post("/v1/bash/output", map[string]any{"session_id": "b1", "command_id": "nope"}),
		post("/v1/bash/exec", map[string]any{"session_id": "b1", "command": "sleep 5", "async_mode": true}),
		post("/v1/bash/kill", map[string]any{"session_id": "b1"}),
		post("/v1/bash/kill", map[string]any{"session_id": "b1", "signal": "SIGWHAT"}),
		post("/v1/bash/sessions/b1/close", nil),
		post("/v1/bash/sessions/b1/close", nil),
		{http.MethodDelete, "/v1/shell/sessions", nil},
		post("/v1/file/write", map[string]any{"file": ws + "/a.txt", "content": "one\ntwo\n"}),
		post("/v1/file/write", map[string]any{"file": vSkills + "/x", "content": "x"}),
		post("/v1/file/write", map[string]any{"file": ws + "/a.txt"}),
		post("/v1/file/read", map[string]any{"file": ws + "/a.txt"}),
		post("/v1/file/read", map[string]any{"file": ws + "/none"}),
		post("/v1/file/read", map[string]any{"file": ws + "/a.txt", "start_line": "x"}),
		post("/v1/file/replace", map[string]any{"file": ws + "/a.txt", "old_str": "one", "new_str": "1"}),
		post("/v1/file/replace", map[string]any{"file": ws + "/a.txt", "old_str": "absent", "new_str": "1"}),
		post("/v1/file/replace", map[string]any{"file": ws + "/a.txt"}),
		post("/v1/file/find", map[string]any{"path": ws, "glob": "*.txt"}),
		post("/v1/file/find", map[string]any{"path": ws}),
		post("/v1/file/grep", map[string]any{"path": ws, "pattern": "two"}),
		post("/v1/file/grep", map[string]any{"path": ws, "pattern": "("}),
		post("/v1/file/grep", map[string]any{"path": "/etc", "pattern": "x"}),
		post("/v1/file/grep", map[string]any{"path": ws, "pattern": "two", "include": []string{"*.txt"}, "context_before": 1, "context_after": 1}),
		post("/v1/file/grep", map[string]any{"path": ws, "pattern": "two", "multiline": true}), // unsupported option: 422
		post("/v1/file/glob", map[string]any{"path": ws, "pattern": "*.txt"}),
		post("/v1/file/glob", map[string]any{"path": ws}),
		post("/v1/file/list", map[string]any{"path": ws, "recursive": true}),
		post("/v1/file/list", map[string]any{"path": ws + "/a.txt"}),
		post("/v1/file/list", map[string]any{"path": "/etc"}),
		post("/v1/file/search", map[string]any{"file": ws + "/a.txt", "regex": "^t"}),
		post("/v1/file/search", map[string]any{"file": ws + "/a.txt", "regex": "("}),
		post("/v1/file/str_replace_editor", map[string]any{"command": "create", "path": ws + "/e.txt", "file_text": "x\ny\n"}),
		post("/v1/file/str_replace_editor", map[string]any{"command": "view", "path": ws + "/e.txt"}),
		post("/v1/file/str_replace_editor", map[string]any{"command": "view", "path": ws}),
		post("/v1/file/str_replace_editor", map[string]any{"command": "str_replace", "path": ws + "/e.txt", "old_str": "x", "new_str": "z"}),
		post("/v1/file/str_replace_editor", map[string]any{"command": "insert", "path": ws + "/e.txt", "insert_line": 1, "new_str": "i"}),
		post("/v1/file/str_replace_editor", map[string]any{"command": "undo_edit", "path": ws + "/e.txt"}),
		post("/v1/file/str_replace_editor", map[string]any{"command": "create", "path": ws + "/e.txt", "file_text": "again"}),
		post("/v1/file/str_replace_editor", map[string]any{"command": "str_replace", "path": ws + "/e.txt", "old_str": "absent"}),
		post("/v1/file/str_replace_editor", map[string]any{"command": "delete", "path": ws + "/e.txt"}),
		{http.MethodGet, "/v1/sandbox/packages/python", nil},
		{http.MethodGet, "/v1/sandbox/packages/nodejs", nil},
		{http.MethodGet, "/v1/code/info", nil},
		post("/v1/code/execute", map[string]any{"language": "python", "code": "print(1)"}),
		post("/v1/code/execute", map[string]any{"language": "javascript", "code": "throw new Error('x')"}),
		post("/v1/code/execute", map[string]any{"language": "cobol", "code": "x"}),
		post("/v1/code/execute", map[string]any{"language": "python"}),
		post("/v1/code/execute", map[string]any{"language": "python", "code": "1", "stateful": true}),
		// malformed bodies reach every JSON endpoint the same way
		post("/v1/file/read", "{not json"),
		{http.MethodGet, sandboxspec.ActivityPath, nil},
		{http.MethodGet, sandboxspec.ActivityPath + "?" + sandboxspec.BusyIdleAfterParam + "=soon", nil},
		{http.MethodGet, sandboxspec.StatsPath, nil},
		{http.MethodGet, sandboxspec.CommandsPath, nil},
		{http.MethodGet, sandboxspec.CommandsPath + "?" + sandboxspec.CommandsLimitParam + "=2", nil},
		{http.MethodGet, sandboxspec.CommandsPath + "?" + sandboxspec.CommandsLimitParam + "=many", nil},
	}
	return calls
}

// The Activity, Stats and Freeze schemas are sandboxspec's types' JSON,
// field for field: the gateway decodes the answers into those types.
func TestSandgateContractIsSandboxspec(t *testing.T) {
	t.Parallel()
	for component, typ := range map[string]reflect.Type{
		"Activity": reflect.TypeFor[sandboxspec.Activity](),
		"Stats":    reflect.TypeFor[sandboxspec.Stats](),
		"Freeze":   reflect.TypeFor[sandboxspec.Freeze](),
	} {
		var fields []string
		for i := range typ.NumField() {
			name, opts, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			kind := map[reflect.Kind]string{reflect.Int: "int", reflect.Int64: "int", reflect.Float64: "num", reflect.String: "str", reflect.Bool: "bool"}[typ.Field(i).Type.Kind()]
			if opts != "omitempty" { // an omitted field is no required one
				name += "!"
			}
			fields = append(fields, name+":"+kind)
		}
		if got, want := strings.Join(fields, " "), sandboxspec.Schemas[component]; got != want {
			t.Errorf("%s is %q, the contract says %q", typ, got, want)
		}
	}
}
