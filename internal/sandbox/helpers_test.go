package sandbox

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testServer is a real sandbox server on a loopback port.
type testServer struct {
	*httptest.Server
	srv  *Server
	root string // host dir holding every mapped dir; must never leak
	ws   string // host dir of /mnt/user-data/workspace
}

const (
	vWorkspace = "/mnt/user-data/workspace"
	vSkills    = "/mnt/skills"
)

// newHostServer serves host mode the way the process backend launches it:
// the thread's user-data dirs read-write, skills read-only.
func newHostServer(t *testing.T, env ...string) *testServer {
	t.Helper()
	return newHostServerWith(t, Config{Env: append(os.Environ(), env...)})
}

// newHostServerWith is newHostServer with cfg's other fields.
func newHostServerWith(t *testing.T, cfg Config) *testServer {
	t.Helper()
	root := filepath.Join(t.TempDir(), "hostroot-7f3a")
	data := filepath.Join(root, "users", "u1", "threads", "t1", "user-data")
	var maps []Mapping
	for _, sub := range []string{"workspace", "uploads", "outputs"} {
		maps = append(maps, Mapping{Virtual: "/mnt/user-data/" + sub, Host: filepath.Join(data, sub)})
	}
	maps = append(maps, Mapping{Virtual: vSkills, Host: filepath.Join(root, "skills"), ReadOnly: true})
	for _, m := range maps {
		if err := os.MkdirAll(m.Host, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "skills", "SKILL.md"), []byte("# skill\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Mappings = maps
	ts := startServer(t, cfg)
	ts.root, ts.ws = root, filepath.Join(data, "workspace")
	return ts
}

func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		srv.Shutdown()
		hs.Close()
		srv.Close()
	})
	return &testServer{Server: hs, srv: srv}
}

// apiResp is the decoded envelope plus the raw body.
type apiResp struct {
	Status  int
	Success bool            `json:"success"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
	Detail  json.RawMessage `json:"detail"`
	Body    string
}

// do sends a request; body is JSON-encoded unless it is a string (sent raw),
// labelled application/json either way.
func (ts *testServer) do(t *testing.T, method, path string, body any) apiResp {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	return ts.send(t, method, path, http.Header{"Content-Type": {"application/json"}}, rd)
}

// send sends a request with exactly header and requires a JSON response.
func (ts *testServer) send(t *testing.T, method, path string, header http.Header, body io.Reader) apiResp {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	out := apiResp{Status: res.StatusCode, Body: string(raw)}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: response is not JSON (%d): %s", method, path, res.StatusCode, raw)
	}
	out.Status = res.StatusCode
	if ts.root != "" && strings.Contains(out.Body, ts.root) {
		t.Errorf("%s %s: response reveals host path %s: %s", method, path, ts.root, raw)
	}
	return out
}

func (ts *testServer) post(t *testing.T, path string, body any) apiResp {
	t.Helper()
	return ts.do(t, http.MethodPost, path, body)
}

// ok posts and requires a 200 success, decoding data into T.
func okData[T any](t *testing.T, ts *testServer, path string, body any) T {
	t.Helper()
	r := ts.post(t, path, body)
	if r.Status != http.StatusOK || !r.Success {
		t.Fatalf("POST %s %v: %d %s", path, body, r.Status, r.Body)
	}
	var v T
	if err := json.Unmarshal(r.Data, &v); err != nil {
		t.Fatalf("POST %s: decode data: %v: %s", path, err, r.Body)
	}
	return v
}

func shellRun(t *testing.T, ts *testServer, body map[string]any) shellResult {
	t.Helper()
	return okData[shellResult](t, ts, "/v1/shell/exec", body)
}

// wantStatus requires an error response with the given status; for 422 it
// also requires the offending field to be named.
func wantStatus(t *testing.T, r apiResp, status int, field string) {
	t.Helper()
	if r.Status != status || r.Success {
		t.Fatalf("want %d, got %d: %s", status, r.Status, r.Body)
	}
	if r.Message == "" {
		t.Fatalf("error without message: %s", r.Body)
	}
	if field != "" {
		var detail []fieldError
		_ = json.Unmarshal(r.Detail, &detail)
		if len(detail) == 0 || detail[0].Loc[len(detail[0].Loc)-1] != field || !strings.Contains(r.Message, field) {
			t.Fatalf("422 does not name field %q: %s", field, r.Body)
		}
	}
}

// alive reports whether pid is a live (non-zombie) process.
func alive(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
