package router

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"github.com/sandgate/sandgate/internal/state"
	"github.com/sandgate/sandgate/internal/telemetry"
	"github.com/sandgate/sandgate/internal/usage"
)

// loadOpenAPI loads and validates the served document (OpenAPI 3.1: kin-openapi
// validates 3.1 documents as such, schemas as JSON Schema 2020-12).
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(openAPIJSON)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI 3.1 document: %v", err)
	}
	return doc
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	loadOpenAPI(t)
}

// TestOpenAPINoTypeArrays: no schema of the served document has a type
// array (type: [string, integer]), which ogen and oapi-codegen refuse.
func TestOpenAPINoTypeArrays(t *testing.T) {
	t.Parallel()
	var doc any
	if err := json.Unmarshal(openAPIJSON, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(at string, v any)
	walk = func(at string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if typ, isList := v["type"].([]any); isList {
				t.Errorf("%s: type %v", at, typ)
			}
			for k, e := range v {
				walk(at+"/"+k, e)
			}
		case []any:
			for i, e := range v {
				walk(at+"/"+strconv.Itoa(i), e)
			}
		}
	}
	walk("", doc)
}

// openAPIMethods are the methods an OpenAPI path item can name; echo.Any
// registers others too (CONNECT, PROPFIND, REPORT), which a path item marked
// x-sandgate-any-method covers.
var openAPIMethods = []string{"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"}

// outsideEcho are the routes ServeHTTP serves before echo, every method.
var outsideEcho = []string{"/c/:capability/v1/*", "/preview/:link/*"}

var echoParam = regexp.MustCompile(`:([A-Za-z_]+)`)

// openAPIPath writes an echo pattern as an OpenAPI path template.
func openAPIPath(echoPath string) string {
	p := echoParam.ReplaceAllString(echoPath, "{$1}")
	if strings.HasSuffix(p, "/*") {
		p = strings.TrimSuffix(p, "*") + "{path}"
	}
	return p
}

// TestOpenAPIMatchesRoutes walks the routes and the document both ways: every
// route is documented, and everything documented is a route.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	// A status source registers the status page's routes, which are absent without one.
	rt := New(Deps{Pool: stubPool{}, Aliases: stubPool{}, Metrics: telemetry.NewMetrics(), Status: Status{Source: statusStub{}}})

	served := map[string]map[string]bool{} // OpenAPI path → method ("*" = any) → served
	add := func(method, path string) {
		p := openAPIPath(path)
		if served[p] == nil {
			served[p] = map[string]bool{}
		}
		served[p][method] = true
	}
	for _, r := range rt.echo.Routes() {
		add(r.Method, r.Path)
	}
	for _, p := range outsideEcho {
		add("*", p)
	}

	var problems []string
	// Routes → document.
	for path, methods := range served {
		item := doc.Paths.Value(path)
		if item == nil {
			problems = append(problems, "route "+strings.Join(sortedKeys(methods), ",")+" "+path+
				" is not in internal/router/openapi.yaml: add paths: "+path)
			continue
		}
		anyMethod := item.Extensions["x-sandgate-any-method"] == true
		for m := range methods {
			switch {
			case m == "*" || !slices.Contains(openAPIMethods, m):
				if !anyMethod {
					problems = append(problems, "route "+m+" "+path+" serves every method: mark paths: "+path+
						" x-sandgate-any-method: true and give it all of "+strings.Join(openAPIMethods, ", "))
				}
				if m == "*" {
					for _, om := range openAPIMethods {
						if item.GetOperation(om) == nil {
							problems = append(problems, "route "+path+" serves every method; openapi.yaml lacks "+
								path+" "+strings.ToLower(om))
						}
					}
				}
			case item.GetOperation(m) == nil:
				problems = append(problems, "route "+m+" "+path+" is not in internal/router/openapi.yaml: add paths: "+
					path+": "+strings.ToLower(m))
			}
		}
	}
	// Document → routes. A sandbox API path is served by its prefix's proxy
	// route (TestOpenAPISandboxAPI checks those paths).
	for _, path := range doc.Paths.InMatchingOrder() {
		if doc.Paths.Value(path).Extensions["x-sandgate-sandbox-api"] == true {
			prefix, _, _ := strings.Cut(path, "/v1/")
			path = prefix + "/v1/{path}"
		}
		methods := served[path]
		if methods == nil {
			problems = append(problems, "openapi.yaml documents "+path+", which no route in router.go serves")
			continue
		}
		for m := range doc.Paths.Value(path).Operations() {
			if !methods[m] && !methods["*"] {
				problems = append(problems, "openapi.yaml documents "+m+" "+path+", which no route in router.go serves")
			}
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

// TestOpenAPISandboxAPI: under each data-plane prefix the document lists
// exactly the sandbox API's routes (sandboxspec.Endpoints, which the
// sandbox server's own test keeps equal to its route table), each with
// its prefixed operationId and the capability's ones without credential.
func TestOpenAPISandboxAPI(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	for _, pre := range sandboxPrefixes {
		var want, got []string
		for _, e := range sandboxspec.Endpoints {
			want = append(want, e.Method+" "+pre.path+e.Path)
			op := doc.Paths.Value(pre.path + e.Path).GetOperation(e.Method)
			id := sandboxspec.OperationID(e)
			if wantID := pre.operation + strings.ToUpper(id[:1]) + id[1:]; op == nil || op.OperationID != wantID {
				t.Errorf("%s %s%s: no operation %s", e.Method, pre.path, e.Path, wantID)
			} else if pre.open != (op.Security != nil && len(*op.Security) == 0) {
				t.Errorf("%s: security %v", wantID, op.Security)
			}
		}
		for path, item := range doc.Paths.Map() {
			if item.Extensions["x-sandgate-sandbox-api"] != true || !strings.HasPrefix(path, pre.path+"/") {
				continue
			}
			for m := range item.Operations() {
				got = append(got, m+" "+path)
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: the document lists\n%q\nthe sandbox API is\n%q", pre.path, got, want)
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIErrorCodesMatchTheTable compares the ErrorCode enum with every
// code errors.go can answer (read from its source: the apiError literals and
// codeOf's returns), both ways.
func TestOpenAPIErrorCodesMatchTheTable(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	documented := map[string]bool{}
	for _, v := range doc.Components.Schemas["ErrorCode"].Value.Enum {
		documented[v.(string)] = true
	}
	table := errorCodesOf(t, "errors.go")
	if len(table) < 10 {
		t.Fatalf("read only %d codes from errors.go: the parser no longer finds them", len(table))
	}
	for code := range table {
		if !documented[code] {
			t.Errorf("errors.go answers code %q; add it to ErrorCode's enum in openapi.yaml", code)
		}
	}
	for code := range documented {
		if !table[code] {
			t.Errorf("openapi.yaml's ErrorCode enum has %q, which errors.go never answers", code)
		}
	}
}

// errorCodesOf finds the codes in file: the second field of each apiError
// literal, and codeOf's string returns.
func errorCodesOf(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]bool{}
	str := func(e ast.Expr) {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			s, _ := strconv.Unquote(lit.Value)
			codes[s] = true
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			if id, ok := n.Type.(*ast.Ident); ok && id.Name == "apiError" && len(n.Elts) > 1 {
				str(n.Elts[1])
			}
		case *ast.FuncDecl:
			if n.Name.Name == "codeOf" {
				ast.Inspect(n.Body, func(m ast.Node) bool {
					if ret, ok := m.(*ast.ReturnStmt); ok && len(ret.Results) == 1 {
						str(ret.Results[0])
					}
					return true
				})
				return false
			}
		}
		return true
	})
	return codes
}

// okPool serves one sandbox, alice's thread t1, as the provisioner alias "t1".
type okPool struct{ stubPool }

var okCreated = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func (okPool) okRecord() state.Record {
	return state.Record{SandboxID: identity.SandboxID("default", "t1"), User: "default", Thread: "t1",
		Backend: "process", State: state.StateActive, CreatedAt: okCreated, Capability: "cap"}
}
func (p okPool) Acquire(_ context.Context, user, thread string) (Sandbox, pool.Outcome, error) {
	return &pool.Route{SandboxID: identity.SandboxID(user, thread), User: user, Thread: thread, Backend: "process",
		CreatedAt: okCreated}, pool.OutcomeCold, nil
}
func (p okPool) Record(_ context.Context, sid string) (state.Record, bool, error) {
	rec := p.okRecord()
	return rec, sid == rec.SandboxID, nil
}
func (p okPool) Records(context.Context) ([]state.Record, error) {
	return []state.Record{p.okRecord()}, nil
}
func (okPool) Capability(context.Context, string) (string, error) { return "cap", nil }
func (okPool) Alive(context.Context, state.Record) (bool, error)  { return true, nil }
func (okPool) Release(context.Context, string, string) error      { return nil }
func (okPool) SetAlias(context.Context, string, string, string) error {
	return nil
}
func (p okPool) Alias(_ context.Context, _, alias string) (string, bool, error) {
	return p.okRecord().SandboxID, alias == "t1", nil
}
func (okPool) DeleteAlias(context.Context, string, string) error { return nil }
func (p okPool) AliasesBySandbox(context.Context, string) (map[string]string, error) {
	return map[string]string{p.okRecord().SandboxID: "t1"}, nil
}

// The text bodies the document gives as strings (HTML pages, the page's
// stylesheet and script, event streams) are checked as such: kin-openapi decodes only
// text/plain by default.
func init() {
	for _, ct := range []string{"text/html", "text/css", "text/javascript", "text/event-stream"} {
		openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
	}
}

// statusStub is an empty fleet with one replica, for the status page.
type statusStub struct{}

func (statusStub) Overview(context.Context, time.Time) (state.Overview, error) {
	return state.Overview{}, nil
}
func (statusStub) Replicas(context.Context) ([]state.Replica, error) {
	return []state.Replica{{Instance: "gw-1", Seen: time.Now()}}, nil
}

// okAdmin is a backend that keeps logs, measures sandboxes and has one
// leftover to prune.
type okAdmin struct{}

func (okAdmin) Fleet() string { return "f1" }
func (okAdmin) Logs(context.Context, string, backend.LogOptions) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("listening on :8080\n")), nil
}
func (okAdmin) Stats(context.Context, string) (backend.Stats, error) {
	return backend.Stats{CPUSeconds: 1.5, MemoryBytes: 1 << 20, PIDs: 3, At: okCreated}, nil
}
func (okAdmin) CanStat() bool { return true }
func (okAdmin) Commands(context.Context, string, int) (sandboxspec.CommandLog, error) {
	return sandboxspec.CommandLog{}, nil
}
func (okAdmin) Prune(_ context.Context, dryRun bool) (api.PruneReport, error) {
	return api.PruneReport{Fleet: "f1", DryRun: dryRun, Items: []api.Pruned{{Kind: "log", Name: "x.log",
		SandboxID: identity.SandboxID("default", "gone")}}}, nil
}

// TestOpenAPIResponsesMatchTheHandlers sends real requests and validates
// each request and its real response against the document (status, headers,
// body schema), so the handlers' shapes cannot drift from it.
func TestOpenAPIResponsesMatchTheHandlers(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	meter := &fakeMeter{u: usage.Usage{Bytes: 42, MeasuredAt: okCreated}}
	ok := okPool{}
	down := stubPool{err: pool.ErrState}
	quiet := slog.New(slog.DiscardHandler)
	okSrv := httptest.NewServer(New(Deps{Pool: ok, Aliases: ok, Meter: meter, Metrics: telemetry.NewMetrics(), Log: quiet,
		Admin: okAdmin{}, Status: Status{Source: statusStub{}}}))
	defer okSrv.Close()
	downSrv := httptest.NewServer(New(Deps{Pool: down, Aliases: down, Log: quiet}))
	defer downSrv.Close()
	doc.Servers = openapi3.Servers{{URL: okSrv.URL}, {URL: downSrv.URL}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	sid := ok.okRecord().SandboxID
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}

	cases := []struct {
		srv                *httptest.Server
		method, path, body string
		status             int
		invalid            bool // the request breaks the document's rules (and the gateway's)
	}{
		{okSrv, "GET", "/healthz", "", 200, false},
		{okSrv, "GET", "/readyz", "", 200, false},
		{okSrv, "GET", "/health", "", 200, false},
		{okSrv, "GET", "/metrics", "", 200, false},
		{okSrv, "GET", "/openapi.json", "", 200, false},
		{okSrv, "GET", "/v1/openapi.json", "", 200, false},
		{okSrv, "PUT", "/threads/t1/sandbox", "", 200, false},
		{okSrv, "GET", "/threads/t1/sandbox", "", 200, false},
		{okSrv, "GET", "/threads/t2/sandbox", "", 404, false},
		{okSrv, "DELETE", "/threads/t1/sandbox", "", 204, false},
		{okSrv, "DELETE", "/threads/t1/sandbox?destroy=maybe", "", 400, true},
		{okSrv, "GET", "/threads/t1/sandbox/metrics", "", 501, false}, // no sampler
		{okSrv, "GET", "/threads/t1/sandbox/metrics?stream=yes", "", 400, true},
		{okSrv, "GET", "/api/capabilities", "", 200, false},
		{okSrv, "POST", "/api/sandboxes", `{"sandbox_id":"t1"}`, 200, false},
		{okSrv, "POST", "/api/sandboxes", `{"sandbox_id":"t1","required_mount_contract_version":1}`, 409, false},
		{okSrv, "POST", "/api/sandboxes", `{"sandbox_id":"a/b"}`, 400, true},
		{okSrv, "GET", "/api/sandboxes", "", 200, false},
		{okSrv, "GET", "/api/sandboxes/t1", "", 200, false},
		{okSrv, "GET", "/api/sandboxes/t9", "", 404, false},
		{okSrv, "DELETE", "/api/sandboxes/t1", "", 200, false},
		{okSrv, "GET", "/c/short/v1/file", "", 404, false},
		{okSrv, "GET", "/sandboxes/NOTHEX/v1/file", "", 400, true},
		{downSrv, "GET", "/threads/t1/v1/file", "", 503, false},
		{downSrv, "POST", "/threads/t1/v1/file", "", 503, false},
		{downSrv, "GET", "/threads/t1/sandbox", "", 503, false},
		{downSrv, "GET", "/api/sandboxes", "", 503, false},
		{okSrv, "GET", "/threads/t1/sandbox/events", "", 404, false}, // no events bus
		{okSrv, "GET", "/threads/t1/sandbox/events?until=now", "", 400, true},
		{okSrv, "POST", "/threads/t1/mcp", mcpInitialize, 200, false},
		{okSrv, "GET", "/threads/t1/mcp", "", 405, false},
		{okSrv, "DELETE", "/threads/t1/mcp", "", 405, false},
		{okSrv, "GET", "/admin/v1/sandboxes", "", 200, false},
		{okSrv, "GET", "/admin/v1/sandboxes?user=default&state=active&backend=process", "", 200, false},
		{okSrv, "GET", "/admin/v1/sandboxes?state=creating", "", 400, true},
		{okSrv, "GET", "/admin/v1/sandboxes/" + sid, "", 200, false},
		{okSrv, "GET", "/admin/v1/sandboxes/0000000000000000", "", 404, false},
		{okSrv, "GET", "/admin/v1/sandboxes/NOTHEX", "", 400, true},
		{okSrv, "DELETE", "/admin/v1/sandboxes/" + sid, "", 200, false},
		{okSrv, "GET", "/admin/v1/sandboxes/" + sid + "/logs?tail=10", "", 200, false},
		{okSrv, "GET", "/admin/v1/sandboxes/" + sid + "/logs?tail=-1", "", 400, true},
		{okSrv, "GET", "/admin/v1/stats", "", 200, false},
		{okSrv, "GET", "/admin/v1/webhooks", "", 501, false}, // no webhooks
		{okSrv, "DELETE", "/admin/v1/webhooks/x", "", 501, false},
		{okSrv, "DELETE", "/admin/v1/users/default/threads/t1", "", 200, false},
		{okSrv, "GET", "/admin/v1/prune", "", 200, false},
		{okSrv, "POST", "/admin/v1/prune", "", 200, false},
		{downSrv, "GET", "/admin/v1/stats", "", 503, false},
		{downSrv, "GET", "/admin/v1/sandboxes", "", 503, false},
		{downSrv, "GET", "/admin/v1/prune", "", 501, false},
		{downSrv, "GET", "/admin/v1/sandboxes/" + sid + "/logs", "", 501, false},
		{okSrv, "GET", "/", "", 200, false},
		{okSrv, "GET", "/status/sandboxes", "", 200, false},
		{okSrv, "GET", "/status/login", "", 303, false}, // authentication is off
		{okSrv, "POST", "/status/logout", "", 303, false},
		{okSrv, "GET", "/status/static/status.css", "", 200, false},
		{okSrv, "GET", "/status/static/status.js", "", 200, false},
		{okSrv, "GET", "/status/static/nothing.txt", "", 404, false},
	}
	for _, c := range cases {
		name := c.method + " " + c.path
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		req, err := http.NewRequest(c.method, c.srv.URL+c.path, body)
		if err != nil {
			t.Fatal(err)
		}
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if strings.HasSuffix(c.path, "/mcp") {
			req.Header.Set("Accept", "application/json, text/event-stream")
		}
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Errorf("%s: not in the document: %v", name, err)
			continue
		}
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
		err = openapi3filter.ValidateRequest(context.Background(), in)
		if err != nil && !c.invalid {
			t.Errorf("%s: request does not match the document: %v", name, err)
		} else if err == nil && c.invalid {
			t.Errorf("%s: the document accepts a request the gateway refuses", name)
		}
		if c.body != "" {
			req.Body = io.NopCloser(strings.NewReader(c.body)) // validation read it
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d %s, want %d", name, resp.StatusCode, got, c.status)
			continue
		}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
			Header: resp.Header, Body: io.NopCloser(strings.NewReader(string(got))), Options: opts}
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			t.Errorf("%s: the %d response does not match the document: %v\n%s", name, resp.StatusCode, err, got)
		}
	}
}

// mcpInitialize is an MCP client's first request.
const mcpInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",` +
	`"capabilities":{},"clientInfo":{"name":"openapi-test","version":"1"}}}`

// TestOpenAPIIsCacheable: both documents (the gateway's, and the sandbox
// API's at /v1/openapi.json, byte for byte what a sandbox serves) carry an
// ETag that revalidates to a 304.
func TestOpenAPIIsCacheable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(New(Deps{Pool: stubPool{}, Aliases: stubPool{}}))
	defer srv.Close()
	for path, want := range map[string][]byte{"/openapi.json": openAPIJSON, "/v1/openapi.json": sandboxspec.OpenAPIJSON()} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		etag := resp.Header.Get("ETag")
		if resp.StatusCode != 200 || etag == "" || string(body) != string(want) {
			t.Fatalf("GET %s: %d, ETag %q, %d bytes (want %d)", path, resp.StatusCode, etag, len(body), len(want))
		}
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("If-None-Match", etag)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified {
			t.Fatalf("%s If-None-Match %s: %d, want 304", path, etag, resp.StatusCode)
		}
	}
}

// The ThreadID pattern is identity.ValidThread's rule.
func TestOpenAPIThreadPattern(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	schema := doc.Components.Schemas["ThreadID"].Value
	for _, id := range []string{"t", "a.b", "...", ".x", "..x", "x..", ":_-", strings.Repeat("x", 128),
		".", "..", "", "a/b", "a b", strings.Repeat("x", 129), "é"} {
		want := identity.ValidThread(id) == nil
		if got := schema.VisitJSON(id) == nil; got != want {
			t.Errorf("%q: the document says valid=%v, identity.ValidThread %v", id, got, want)
		}
	}
}
