package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

func TestFloorHandlers(t *testing.T) {
	t.Parallel()
	var last atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last.Store(r.URL.Path)
		_, _ = io.WriteString(w, "sandbox")
	}))
	t.Cleanup(up.Close)
	for _, tc := range []struct {
		server, path string
		status       int
		upstream     string // the path the sandbox saw; "" = not reached
	}{
		{"net/http", "/threads/bench/v1/sandbox", http.StatusOK, "/v1/sandbox"},
		{"sandgate", "/threads/bench/v1/sandbox", http.StatusOK, "/v1/sandbox"},
		{"sandgate-echo", "/threads/bench/v1/sandbox", http.StatusOK, "/v1/sandbox"},
		// Echo routes only the gateway's data-plane route.
		{"sandgate-echo", "/threads/bench/sandbox", http.StatusNotFound, ""},
	} {
		t.Run(tc.server+tc.path, func(t *testing.T) {
			h, err := handler(up.URL, "/threads/bench", tc.server)
			if err != nil {
				t.Fatal(err)
			}
			last.Store("")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			if rec.Code != tc.status || last.Load() != tc.upstream {
				t.Fatalf("status %d, sandbox saw %q; want %d, %q", rec.Code, last.Load(), tc.status, tc.upstream)
			}
		})
	}
	if _, err := handler(up.URL, "", "nginx"); err == nil {
		t.Fatal("an unknown -server was accepted")
	}
	if _, err := handler("unix:///x", "", "sandgate"); err == nil {
		t.Fatal("a non-http upstream was accepted")
	}
}
