package router

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/internal/pool"
)

// TestProvisionerErrorsCarryBothShapes: every error of the provisioner API
// (/api/...) is the gateway's documented envelope {"error": {"code",
// "message"}} and, beside it, FastAPI's "detail" that DeerFlow reads (issue
// 40, point 14: the 404 and the mount-contract 409 were "detail" only).
func TestProvisionerErrorsCarryBothShapes(t *testing.T) {
	t.Parallel()
	ok := okPool{}
	quiet := slog.New(slog.DiscardHandler)
	okSrv := httptest.NewServer(New(Deps{Pool: ok, Aliases: ok, Log: quiet}))
	defer okSrv.Close()
	down := stubPool{err: pool.ErrState}
	downSrv := httptest.NewServer(New(Deps{Pool: down, Aliases: down, Log: quiet}))
	defer downSrv.Close()
	for _, tc := range []struct {
		srv                *httptest.Server
		method, path, body string
		status             int
		code               string
		detailObject       bool // DeerFlow's 409 detail is an object
	}{
		{okSrv, "GET", "/api/sandboxes/t9", "", 404, "not_found", false},
		{okSrv, "POST", "/api/sandboxes", `{"sandbox_id":"t1","required_mount_contract_version":1}`, 409, "conflict", true},
		{okSrv, "POST", "/api/sandboxes", `{"sandbox_id":"a/b"}`, 400, "bad_request", false},
		{okSrv, "POST", "/api/sandboxes", `{`, 400, "bad_request", false},
		{downSrv, "GET", "/api/sandboxes", "", 503, "", false},
	} {
		req, _ := http.NewRequest(tc.method, tc.srv.URL+tc.path, strings.NewReader(tc.body))
		if tc.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var body struct {
			Error *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
			Detail json.RawMessage `json:"detail"`
		}
		if err := json.Unmarshal(data, &body); err != nil || resp.StatusCode != tc.status {
			t.Errorf("%s %s: %d %s (%v), want %d", tc.method, tc.path, resp.StatusCode, data, err, tc.status)
			continue
		}
		if body.Error == nil || body.Error.Code == "" || body.Error.Message == "" || (tc.code != "" && body.Error.Code != tc.code) {
			t.Errorf("%s %s: no error envelope with code %q: %s", tc.method, tc.path, tc.code, data)
		}
		if len(body.Detail) == 0 || (tc.detailObject != (body.Detail[0] == '{')) || (!tc.detailObject && body.Detail[0] != '"') {
			t.Errorf("%s %s: detail %s, want an object: %v", tc.method, tc.path, body.Detail, tc.detailObject)
		}
	}
}
