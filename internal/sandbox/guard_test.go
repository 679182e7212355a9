package sandbox

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// jsonPosts is every JSON POST endpoint; each must refuse other bodies.
var jsonPosts = []string{
	"/v1/shell/exec", "/v1/shell/view", "/v1/shell/kill", "/v1/shell/sessions/create", "/v1/bash/exec",
	"/v1/file/read", "/v1/file/write", "/v1/file/replace", "/v1/file/find", "/v1/file/glob",
	"/v1/file/list", "/v1/file/grep",
}

func TestJSONEndpointsRefuseOtherContentTypes(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	for _, path := range jsonPosts {
		for _, ct := range []string{"text/plain", "", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonp", "application/json; charset"} {
			hdr := http.Header{}
			if ct != "" {
				hdr.Set("Content-Type", ct)
			}
			r := ts.send(t, http.MethodPost, path, hdr, strings.NewReader(`{"command":"true","id":"x","file":"x","path":"x"}`))
			wantStatus(t, r, http.StatusUnsupportedMediaType, "")
			if !strings.Contains(r.Message, "application/json") || r.Data == nil || string(r.Data) != "null" {
				t.Fatalf("POST %s (%q): 415 does not name the type or is not the envelope: %s", path, ct, r.Body)
			}
		}
	}
	r := ts.send(t, http.MethodPost, "/v1/file/upload", http.Header{"Content-Type": {"application/json"}}, strings.NewReader("{}"))
	wantStatus(t, r, http.StatusUnsupportedMediaType, "")
	if !strings.Contains(r.Message, "multipart/form-data") {
		t.Fatalf("upload 415 does not name multipart/form-data: %s", r.Body)
	}
}

func TestJSONContentTypeParameters(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	for _, ct := range []string{"application/json; charset=utf-8", "Application/JSON;charset=UTF-8"} {
		r := ts.send(t, http.MethodPost, "/v1/shell/exec", http.Header{"Content-Type": {ct}}, strings.NewReader(`{"command":"echo ok"}`))
		if r.Status != http.StatusOK || !strings.Contains(string(r.Data), `"output":"ok\n"`) {
			t.Fatalf("Content-Type %q: %d %s", ct, r.Status, r.Body)
		}
	}
	// GET endpoints take no body and need no Content-Type.
	if r := ts.send(t, http.MethodGet, "/v1/sandbox", http.Header{}, nil); r.Status != http.StatusOK {
		t.Fatalf("GET /v1/sandbox without Content-Type: %d %s", r.Status, r.Body)
	}
}

func TestCrossSiteRequestsRefused(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	self := strings.TrimPrefix(ts.URL, "http://")
	for _, tc := range []struct {
		name   string
		header http.Header
		status int
	}{
		{"no browser headers", nil, http.StatusOK},
		{"same origin", http.Header{"Origin": {ts.URL}, "Sec-Fetch-Site": {"same-origin"}}, http.StatusOK},
		{"same host behind TLS", http.Header{"Origin": {"https://" + self}}, http.StatusOK},
		{"proxy's host", http.Header{"Origin": {"https://gw.example"}, "X-Forwarded-Host": {"gw.example"}}, http.StatusOK},
		{"proxy chain", http.Header{"Origin": {"https://gw.example"}, "X-Forwarded-Host": {"edge.example, gw.example"}}, http.StatusOK},
		{"other site", http.Header{"Origin": {"https://evil.example"}}, http.StatusForbidden},
		{"other loopback port", http.Header{"Origin": {"http://127.0.0.1:1"}}, http.StatusForbidden},
		{"opaque origin", http.Header{"Origin": {"null"}}, http.StatusForbidden},
		{"origin not the forwarded host", http.Header{"Origin": {"https://evil.example"}, "X-Forwarded-Host": {"gw.example"}}, http.StatusForbidden},
		{"sec-fetch-site cross-site", http.Header{"Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden},
		{"sec-fetch-site cross-site, same origin", http.Header{"Origin": {ts.URL}, "Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := strings.NewReplacer(" ", "-", ",", "", "'", "").Replace(tc.name)
			for _, req := range []sideEffect{
				{http.MethodPost, "/v1/shell/exec", "application/json",
					strings.NewReader(`{"command":"touch ` + vWorkspace + `/exec-` + marker + `"}`), "exec-" + marker},
				uploadReq(vWorkspace+"/up-"+marker, "up-"+marker),
				{http.MethodGet, "/v1/sandbox", "", nil, ""},
			} {
				hdr := tc.header.Clone()
				if hdr == nil {
					hdr = http.Header{}
				}
				if req.ct != "" {
					hdr.Set("Content-Type", req.ct)
				}
				r := ts.send(t, req.method, req.path, hdr, req.body)
				if r.Status != tc.status {
					t.Fatalf("%s %s: want %d, got %d: %s", req.method, req.path, tc.status, r.Status, r.Body)
				}
				if tc.status == http.StatusForbidden {
					wantStatus(t, r, http.StatusForbidden, "")
				}
				if req.landed == "" {
					continue
				}
				_, err := os.Stat(filepath.Join(ts.ws, req.landed))
				if landed := err == nil; landed != (tc.status == http.StatusOK) {
					t.Fatalf("%s %s: status %d but file created = %v", req.method, req.path, r.Status, landed)
				}
			}
		})
	}
}

// sideEffect is a request that, when admitted, creates file landed in the
// workspace ("" = none).
type sideEffect struct {
	method, path, ct string
	body             io.Reader
	landed           string
}

// uploadReq is a multipart upload of a small file to target.
func uploadReq(target, name string) sideEffect {
	ct, body := uploadBody(target, name, []byte("x"), true)
	return sideEffect{http.MethodPost, "/v1/file/upload", ct, body, name}
}

func TestCrossSiteBeatsContentType(t *testing.T) {
	t.Parallel()
	ts := newHostServer(t)
	r := ts.send(t, http.MethodPost, "/v1/shell/exec",
		http.Header{"Content-Type": {"text/plain"}, "Origin": {"https://evil.example"}}, strings.NewReader(`{"command":"true"}`))
	wantStatus(t, r, http.StatusForbidden, "")
}
