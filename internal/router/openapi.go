package router

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/sandgate/sandgate/internal/sandboxspec"
	"go.yaml.in/yaml/v3"
)

// The gateway's own API is described by hand in openapi.yaml (YAML for its
// anchors, which keep the many data-plane operations to one copy) and served
// as JSON, with the sandbox API (internal/sandboxspec) merged in under each
// data-plane prefix. TestOpenAPIMatchesRoutes keeps it and the routes equal.

//go:embed openapi.yaml
var openAPIYAML []byte

// openAPIJSON is the document as served, and openAPIETag its strong ETag;
// both are made once, at start, from the embedded YAML.
var openAPIJSON, openAPIETag = mustOpenAPIJSON(openAPIYAML)

// mustOpenAPIJSON converts the YAML document to JSON. The document is part of
// the binary, so a bad one is a build defect (the tests load it): panic.
func mustOpenAPIJSON(src []byte) ([]byte, string) {
	var doc map[string]any
	if err := yaml.Unmarshal(src, &doc); err != nil {
		panic(fmt.Sprintf("openapi.yaml: %v", err))
	}
	delete(doc, "x-sandgate-templates") // the anchors' source, merged where used
	if err := mergeSandboxAPI(doc); err != nil {
		panic(fmt.Sprintf("openapi.yaml: %v", err))
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("openapi.yaml: %v", err))
	}
	return b, etagOf(b)
}

// sandboxPrefixes are the data-plane prefixes the sandbox API is reached
// under: its routes are listed under each (the `{path}` routes of
// openapi.yaml still stand for every other path and method).
var sandboxPrefixes = []struct {
	path, operation, param string
	open                   bool // the capability is the credential
}{
	{"/threads/{thread}", "thread", "thread", false},
	{"/sandboxes/{id}", "sandbox", "sandboxID", false},
	{"/c/{capability}", "capability", "capability", true},
}

// mergeSandboxAPI adds the sandbox API (sandboxspec.OpenAPI) to doc under
// each data-plane prefix: its schemas once (a name both use is an error),
// its paths per prefix, marked x-sandgate-sandbox-api (served by the
// prefix's proxy route, not a route of their own), each operation's
// failures either the sandbox's envelope or the gateway's Error.
func mergeSandboxAPI(doc map[string]any) error {
	paths, _ := doc["paths"].(map[string]any)
	components, _ := doc["components"].(map[string]any)
	schemas, _ := components["schemas"].(map[string]any)
	if paths == nil || schemas == nil {
		return fmt.Errorf("no paths or components.schemas")
	}
	for name, s := range sandboxspec.OpenAPI()["components"].(map[string]any)["schemas"].(map[string]any) {
		if _, taken := schemas[name]; taken {
			return fmt.Errorf("schema %s is both the gateway's and the sandbox API's", name)
		}
		schemas[name] = s
	}
	failed := map[string]any{"description": "a failure: the sandbox's envelope, or the gateway's Error when the gateway failed",
		"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"oneOf": []any{
			map[string]any{"$ref": "#/components/schemas/" + sandboxspec.EnvelopeSchema},
			map[string]any{"$ref": "#/components/schemas/Error"},
		}}}}}
	for _, pre := range sandboxPrefixes {
		// A fresh document per prefix: nothing is shared between them.
		for p, v := range sandboxspec.OpenAPI()["paths"].(map[string]any) {
			item := v.(map[string]any)
			params, _ := item["parameters"].([]any)
			item["parameters"] = append([]any{map[string]any{"$ref": "#/components/parameters/" + pre.param}}, params...)
			item["x-sandgate-sandbox-api"] = true
			for method, o := range item {
				op, isOp := o.(map[string]any)
				if !isOp || method == "parameters" {
					continue
				}
				id := op["operationId"].(string)
				op["operationId"] = pre.operation + strings.ToUpper(id[:1]) + id[1:]
				op["tags"] = []any{"data plane"}
				if pre.open {
					op["security"] = []any{}
				}
				op["responses"].(map[string]any)["default"] = failed
			}
			paths[pre.path+p] = item
		}
	}
	return nil
}

// serveOpenAPI is GET /openapi.json and serveSandboxOpenAPI GET
// /v1/openapi.json (the sandbox API alone, as every sandbox of this
// version serves it): open (they document the API, not its data),
// cacheable and revalidated by ETag.
var (
	serveOpenAPI        = serveDocument(openAPIJSON, openAPIETag)
	serveSandboxOpenAPI = serveDocument(sandboxspec.OpenAPIJSON(), etagOf(sandboxspec.OpenAPIJSON()))
)

func etagOf(b []byte) string {
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:8]) + `"`
}

func serveDocument(doc []byte, etag string) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("ETag", etag)
		h.Set("Cache-Control", "public, max-age=300")
		if match := c.Request().Header.Get("If-None-Match"); match != "" && strings.Contains(match, etag) {
			return c.NoContent(http.StatusNotModified)
		}
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, doc)
	}
}
