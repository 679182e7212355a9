package sandbox

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// TestOpenAPIIsTheRouteTable: the document the server serves at
// /v1/openapi.json is a valid OpenAPI 3.1 document (kin-openapi) and
// describes exactly the routes the server registers, method for method.
func TestOpenAPIIsTheRouteTable(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	res, err := http.Get(ts.URL + sandboxspec.OpenAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %s", sandboxspec.OpenAPIPath, res.StatusCode, res.Header.Get("Content-Type"))
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("not a valid OpenAPI document: %v", err)
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	registered := ts.srv.Routes()
	slices.Sort(documented)
	slices.Sort(registered)
	if !slices.Equal(documented, registered) {
		t.Fatalf("the document and the routes differ:\ndocument: %q\nroutes:   %q", documented, registered)
	}
}

// TestRequestSchemasAreAIOs: each request schema names exactly the fields
// the request contract sends (its required fields and every option), so a
// generated client can set every option the server reads or refuses;
// besides them only Sandgate's own extensions.
func TestRequestSchemasAreAIOs(t *testing.T) {
	t.Parallel()
	extensions := map[string][]string{"POST /v1/shell/exec": {"env"}}
	byEndpoint := map[string]string{}
	for _, e := range sandboxspec.Endpoints {
		byEndpoint[e.Method+" "+e.Path] = e.Request
	}
	for _, req := range aioRequests(vWorkspace) {
		schema := sandboxspec.Schemas[byEndpoint[req.endpoint]]
		if schema == "" {
			t.Errorf("%s: no request schema", req.endpoint)
			continue
		}
		var got, want []string
		for _, f := range strings.Fields(schema) {
			name, _, _ := strings.Cut(f, ":")
			got = append(got, name)
		}
		for k := range req.base {
			want = append(want, k+"!")
		}
		for k := range req.options {
			want = append(want, k)
		}
		want = append(want, extensions[req.endpoint]...)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: schema %s has %q, the contract %q", req.endpoint, byEndpoint[req.endpoint], got, want)
		}
	}
}
