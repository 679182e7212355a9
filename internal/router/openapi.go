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
	"go.yaml.in/yaml/v3"
)

// The gateway's own API is described by hand in openapi.yaml (YAML for its
// anchors, which keep the many data-plane operations to one copy) and served
// as JSON. TestOpenAPIMatchesRoutes keeps it and the routes equal.

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
	b, err := json.Marshal(doc)
	if err != nil {
		panic(fmt.Sprintf("openapi.yaml: %v", err))
	}
	sum := sha256.Sum256(b)
	return b, `"` + hex.EncodeToString(sum[:8]) + `"`
}

// serveOpenAPI is GET /openapi.json: open (it documents the API, not its
// data), cacheable and revalidated by ETag.
func serveOpenAPI(c echo.Context) error {
	h := c.Response().Header()
	h.Set("ETag", openAPIETag)
	h.Set("Cache-Control", "public, max-age=300")
	if match := c.Request().Header.Get("If-None-Match"); match != "" && strings.Contains(match, openAPIETag) {
		return c.NoContent(http.StatusNotModified)
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPIJSON)
}
