package mcp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/api"
)

// templateGateway stands in for the gateway's /api/templates and thread
// t1's PUT /threads/t1/sandbox in the router's shapes and rules: unknown
// templates are 400s and a reserved variable a 403, both naming the field;
// a body that changes the stored options replaces the sandbox (a "cold"
// create), the same body again keeps it ("hit"). It records each request
// and the Authorization header of the last.
type templateGateway struct {
	asked  requests
	auth   atomic.Value
	list   api.TemplateList
	mu     sync.Mutex
	stored *api.CreateSandbox
	made   int
}

func (g *templateGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body := g.asked.add(r)
	g.auth.Store(r.Header.Get("Authorization"))
	switch r.Method + " " + r.URL.Path {
	case "GET /api/templates":
		writeJSON(w, http.StatusOK, g.list)
	case "PUT /threads/t1/sandbox":
		var req api.CreateSandbox
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if r.Header.Get("Content-Type") != "application/json" || dec.Decode(&req) != nil {
			writeCode(w, http.StatusBadRequest, "bad_request", "the body is not a JSON create")
			return
		}
		if req.Template != "python" && req.Template != "minimal" {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"code": "bad_request", "field": "template",
				"message": `template: template not configured: "` + req.Template + `" (GET /api/templates lists them)`}})
			return
		}
		if _, ok := req.Env["HTTP_PROXY"]; ok {
			writeJSON(w, http.StatusForbidden, map[string]any{"error": map[string]string{"code": "forbidden", "field": "env",
				"message": "env: HTTP_PROXY is the gateway's to set (egress goes through the egress field)"}})
			return
		}
		g.mu.Lock()
		outcome := "hit"
		if !reflect.DeepEqual(g.stored, &req) {
			g.stored, outcome = &req, "cold"
			g.made++
		}
		g.mu.Unlock()
		writeJSON(w, http.StatusOK, api.Sandbox{SandboxID: "5f0c6e1d2b3a4958", Thread: "t1", User: "u", Backend: "process",
			Template: req.Template, State: "active", Outcome: outcome, SandboxURL: "http://gw/c/capability"})
	default:
		writeCode(w, http.StatusServiceUnavailable, "capacity", "the fleet is at capacity")
	}
}

// TestTemplateTools: an agent lists the templates and switches its
// thread's sandbox to one, with the caller's credential; a refusal is a
// tool error that says nothing changed and names the field.
func TestTemplateTools(t *testing.T) {
	t.Parallel()
	gw := &templateGateway{list: api.TemplateList{Default: "python", Templates: []api.Template{
		{Name: "python", Default: true, Image: "python:3.12", Memory: 512 << 20, MaxMemory: 2 << 30, EnvNames: []string{"PIP_INDEX_URL"}, Prewarm: 2},
		{Name: "minimal"},
	}}}
	srv := New(gw, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { srv.ServeThread(w, r, "t1") }))
	t.Cleanup(hs.Close)
	cs := connectAs(t, hs.URL, "Bearer user-key")

	for _, step := range []struct {
		name    string
		tool    string
		args    map[string]any
		isError bool
		want    string // the whole text, or with "..." a prefix and a contained part
		asked   string // the request it made, "" = none
	}{
		{"list", "list_templates", nil, false,
			"2 templates (default: python):\n- python (default): image python:3.12; memory 512MiB; up to 2GiB; sets PIP_INDEX_URL\n" +
				"- minimal\nuse_template switches this thread's sandbox to one.", "GET /api/templates"},
		{"switch", "use_template", map[string]any{"template": "minimal", "env": map[string]any{"A": "1"}}, false,
			"Replaced this thread's sandbox with one of template minimal: sandbox 5f0c6e1d2b3a4958, active. Files under /mnt/user-data stay; " +
				"processes that were running are gone, and so is anything installed outside /mnt/user-data: restart servers you need.",
			`PUT /threads/t1/sandbox {"template":"minimal","env":{"A":"1"}}`},
		{"the same again keeps it", "use_template", map[string]any{"template": "minimal", "env": map[string]any{"A": "1"}}, false,
			"This thread's sandbox (5f0c6e1d2b3a4958) already uses template minimal with these settings: nothing was replaced.",
			`PUT /threads/t1/sandbox {"template":"minimal","env":{"A":"1"}}`},
		{"unknown template", "use_template", map[string]any{"template": "nope"}, true,
			`Error: the gateway refused it, nothing was changed: template: template not configured: "nope" (GET /api/templates lists them)`,
			`PUT /threads/t1/sandbox {"template":"nope"}`},
		{"reserved variable", "use_template", map[string]any{"template": "python", "env": map[string]any{"HTTP_PROXY": "x"}}, true,
			"Error: the gateway refused it, nothing was changed: env: HTTP_PROXY is the gateway's to set...",
			`PUT /threads/t1/sandbox {"template":"python","env":{"HTTP_PROXY":"x"}}`},
		{"empty template", "use_template", map[string]any{"template": ""}, true,
			"Error: template is required (list_templates shows the names)", ""},
	} {
		before := len(gw.asked.list())
		got, isErr := callTool(t, cs, step.tool, step.args)
		prefix, part, cut := strings.Cut(step.want, "...")
		if isErr != step.isError || (cut && (!strings.HasPrefix(got, prefix) || !strings.Contains(got, part))) || (!cut && got != step.want) {
			t.Errorf("%s: isError %v %q, want %v %q", step.name, isErr, got, step.isError, step.want)
		}
		asked := gw.asked.list()[before:]
		if want := []string{step.asked}; step.asked == "" && len(asked) != 0 || step.asked != "" && !reflect.DeepEqual(asked, want) {
			t.Errorf("%s: asked %q, want %q", step.name, asked, step.asked)
		}
	}
	gw.mu.Lock()
	if gw.made != 1 {
		t.Errorf("%d sandboxes made, want 1: only the first switch changes the stored options", gw.made)
	}
	gw.mu.Unlock()
	if a, _ := gw.auth.Load().(string); a != "Bearer user-key" {
		t.Errorf("Authorization %q: the caller's credential was not passed on", a)
	}
}

// Without templates the list says so; a gateway failure names its code.
func TestTemplateToolsWithout(t *testing.T) {
	t.Parallel()
	gw := &templateGateway{list: api.TemplateList{Templates: []api.Template{}}}
	srv := New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			r.URL.Path = "/elsewhere" // the stand-in's 503
		}
		gw.ServeHTTP(w, r)
	}), nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { srv.ServeThread(w, r, "t1") }))
	t.Cleanup(hs.Close)
	cs := connect(t, hs.URL)
	if got, isErr := callTool(t, cs, "list_templates", nil); isErr ||
		got != "This gateway offers no templates: every sandbox is made from its backend's configuration." {
		t.Errorf("list_templates: %v %q", isErr, got)
	}
	if got, isErr := callTool(t, cs, "use_template", map[string]any{"template": "python"}); !isErr ||
		got != "Error: switching the template failed: the fleet is at capacity (capacity)" {
		t.Errorf("use_template: %v %q", isErr, got)
	}
}

// previewGateway stands in for thread t1's POST /threads/t1/previews in
// the router's shape; port 1 is refused as the router refuses a bad ttl.
type previewGateway struct{ asked requests }

func (g *previewGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body := g.asked.add(r)
	var req api.CreatePreview
	if r.Method+" "+r.URL.Path != "POST /threads/t1/previews" || json.Unmarshal(body, &req) != nil {
		writeCode(w, http.StatusNotFound, "not_found", "no such route")
		return
	}
	if req.TTL == "forever" {
		writeCode(w, http.StatusBadRequest, "bad_request", `bad preview link request: ttl "forever" is not a duration such as 30m or 2h`)
		return
	}
	writeJSON(w, http.StatusCreated, api.Preview{ID: "0a1b2c3d4e5f", URL: "http://link.preview.example/", Port: req.Port,
		ExpiresAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)})
}

// TestExposePort: the tool returns the link the gateway made for the port;
// a refusal is a tool error quoting the gateway; a bad port asks nothing.
func TestExposePort(t *testing.T) {
	t.Parallel()
	gw := &previewGateway{}
	srv := New(gw, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { srv.ServeThread(w, r, "t1") }))
	t.Cleanup(hs.Close)
	cs := connectAs(t, hs.URL, "Bearer user-key")
	for _, step := range []struct {
		name    string
		args    map[string]any
		isError bool
		want    string
		asked   []string
	}{
		{"link", map[string]any{"port": 3000, "ttl": "2h"}, false,
			"Port 3000 of this sandbox is at http://link.preview.example/ until 2030-01-01T00:00:00Z (link 0a1b2c3d4e5f). " +
				"Anyone with the link can open it; a server that is not listening yet answers 502 until it is.",
			[]string{`POST /threads/t1/previews {"port":3000,"ttl":"2h"}`}},
		{"bad ttl", map[string]any{"port": 3000, "ttl": "forever"}, true,
			`Error: the gateway refused it: bad preview link request: ttl "forever" is not a duration such as 30m or 2h`,
			[]string{`POST /threads/t1/previews {"port":3000,"ttl":"forever"}`}},
		{"bad port", map[string]any{"port": 70000}, true, "Error: port must be 1-65535", nil},
	} {
		before := len(gw.asked.list())
		got, isErr := callTool(t, cs, "expose_port", step.args)
		if isErr != step.isError || got != step.want {
			t.Errorf("%s: isError %v %q, want %v %q", step.name, isErr, got, step.isError, step.want)
		}
		if asked := gw.asked.list()[before:]; !reflect.DeepEqual(asked, step.asked) && (len(asked) != 0 || step.asked != nil) {
			t.Errorf("%s: asked %q, want %q", step.name, asked, step.asked)
		}
	}
}
