package router

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sandgate/sandgate/internal/api"
	"github.com/sandgate/sandgate/internal/testutil"
	"github.com/sandgate/sandgate/internal/webhook"
)

type noDial struct{}

func (noDial) DialContext(context.Context, string, string) (net.Conn, error) {
	return nil, net.ErrClosed
}

// The webhook routes over a real webhook.Service on a real redis-server:
// each answer's status and error code, the secret shown by the create
// alone, a configured endpoint not deletable.
func TestWebhookRoutes(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rdb.Close()
	svc, err := webhook.New(rdb, webhook.Config{Keys: webhook.Keys{Stream: "r{fleet}:events", Endpoints: "r{fleet}:webhooks",
		Stats: "r{fleet}:whstats", DeadPrefix: "r{fleet}:whdead:"},
		Endpoints: []webhook.Endpoint{{ID: "conf", URL: "https://hooks.example/", Secret: webhook.NewSecret()}},
		Log:       slog.New(slog.DiscardHandler)}, noDial{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Deps{Pool: stubPool{}, Aliases: stubPool{}, Webhooks: svc, Log: slog.New(slog.DiscardHandler)}))
	defer srv.Close()
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code := func(body string) string {
		var e api.ErrorBody
		_ = json.Unmarshal([]byte(body), &e)
		return e.Error.Code
	}
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/admin/v1/webhooks", `{"url": 1}`, 400, "bad_request"},
		{"POST", "/admin/v1/webhooks", `{"url": "https://x/", "colour": "red"}`, 400, "bad_request"},
		{"POST", "/admin/v1/webhooks", `{"url": "gopher://x/"}`, 400, "bad_request"},
		{"POST", "/admin/v1/webhooks", `{"url": "https://x/", "secret": "hunter2"}`, 400, "bad_request"},
		{"DELETE", "/admin/v1/webhooks/conf", "", 409, "conflict"},
		{"DELETE", "/admin/v1/webhooks/nope", "", 404, "webhook_not_found"},
		{"GET", "/admin/v1/webhooks/nope/dead-letters", "", 404, "webhook_not_found"},
		{"GET", "/admin/v1/webhooks/conf/dead-letters?limit=0", "", 400, "bad_request"},
		{"GET", "/admin/v1/webhooks/conf/dead-letters", "", 200, ""},
	} {
		status, body := do(tc.method, tc.path, tc.body)
		if status != tc.status || code(body) != tc.code {
			t.Errorf("%s %s %s: %d %s, want %d %s", tc.method, tc.path, tc.body, status, body, tc.status, tc.code)
		}
	}
	status, body := do("POST", "/admin/v1/webhooks", `{"url": "https://hooks.example/new", "events": ["destroyed"]}`)
	var created webhook.Endpoint
	if err := json.Unmarshal([]byte(body), &created); status != 201 || err != nil || !strings.HasPrefix(created.Secret, webhook.SecretPrefix) {
		t.Fatalf("create: %d %s", status, body)
	}
	status, body = do("GET", "/admin/v1/webhooks", "")
	if status != 200 || !strings.Contains(body, `"count":2`) || strings.Contains(body, "whsec_") || !strings.Contains(body, `"dead_lettered":0`) {
		t.Fatalf("list: %d %s", status, body)
	}
	if status, body = do("DELETE", "/admin/v1/webhooks/"+created.ID, ""); status != 204 {
		t.Fatalf("delete: %d %s", status, body)
	}
	if status, _ = do("DELETE", "/admin/v1/webhooks/"+created.ID, ""); status != 404 {
		t.Fatalf("second delete: %d", status)
	}
}
