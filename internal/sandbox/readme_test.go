package sandbox

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestREADMEEndpointTable: the README's AIO endpoint table lists exactly
// the routes the server registers, and each listed route is served by its
// own handler (not the 404 fallback).
func TestREADMEEndpointTable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, found := strings.Cut(string(readme), "<!-- aio-endpoints:begin -->")
	table, _, found2 := strings.Cut(table, "<!-- aio-endpoints:end -->")
	if !found || !found2 {
		t.Fatal("README lacks the aio-endpoints table markers")
	}
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z]+ /v1/[^`]*)` \\|").FindAllStringSubmatch(table, -1) {
		listed = append(listed, m[1])
	}
	ts := newHostServer(t)
	var registered []string
	for _, pattern := range ts.srv.Routes() {
		if strings.Contains(pattern, " /v1/") {
			registered = append(registered, pattern)
		}
	}
	slices.Sort(listed)
	slices.Sort(registered)
	if !slices.Equal(listed, registered) {
		t.Fatalf("README table and server routes differ:\nREADME: %v\nserver: %v", listed, registered)
	}

	for _, ep := range listed {
		method, p, _ := strings.Cut(ep, " ")
		p = strings.NewReplacer("{id}", "x", "{session_id}", "x").Replace(p)
		if _, pattern := ts.srv.mux.Handler(httptest.NewRequest(method, p, nil)); pattern != ep {
			t.Errorf("%s is served by %q", ep, pattern)
		}
	}
}
