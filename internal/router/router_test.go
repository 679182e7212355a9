package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate/internal/backend"
	"github.com/sandgate/sandgate/internal/identity"
	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/proxy"
	"github.com/sandgate/sandgate/internal/state"
)

func TestStatusTable(t *testing.T) {
	t.Parallel()
	dial := &net.OpError{Op: "dial", Err: errors.New("refused")}
	cases := []struct {
		err    error
		status int
		code   string
		retry  bool
	}{
		{identity.ErrBadThread, 400, "bad_request", false},
		{errBadSandboxID, 400, "bad_request", false},
		{errCrossSite, 403, "forbidden", false},
		{pool.ErrNotFound, 404, "not_found", false},
		{fmt.Errorf("x: %w", pool.ErrProvisioning), 503, "provisioning", true},
		{fmt.Errorf("x: %w", pool.ErrCapacity), 503, "capacity", true},
		{fmt.Errorf("%w: dial redis: refused", pool.ErrState), 503, "state_unavailable", true},
		{fmt.Errorf("%w: engine", backend.ErrUnavailable), 503, "backend_unavailable", true},
		{fmt.Errorf("%w: image", pool.ErrCreate), 502, "sandbox_start_failed", false},
		{fmt.Errorf("%w: %w", pool.ErrCreate, &backend.ImageError{Image: "reg.example/sbx:1", Err: errors.New("pull /var/lib/x")}), 502, "sandbox_image_missing", false},
		{fmt.Errorf("%w: mkdir /srv/data: no space left on device", pool.ErrStorage), 507, "storage_unavailable", false},
		{&proxy.UnreachableError{Err: dial}, 502, "sandbox_unreachable", false},
		{&proxy.PortError{Port: "3000", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, 502, "port_closed", false},
		{&proxy.PortError{Port: "3000", Err: &net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded}}, 502, "port_unreachable", false},
		{&proxy.ExchangeError{Err: fmt.Errorf("%w: a symlink", backend.ErrUnsafeSocket)}, 502, "sandbox_socket_refused", false},
		{&proxy.ResolveError{Err: pool.ErrCapacity}, 503, "capacity", true},
		{&net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, 502, "sandbox_connection_lost", false},
		{io.ErrUnexpectedEOF, 502, "sandbox_connection_lost", false},
		{&proxy.ExchangeError{Err: errors.New("write unix /var/lib/x.sock: broken pipe")}, 502, "sandbox_connection_lost", false},
		{&proxy.ExchangeError{Err: context.DeadlineExceeded}, 504, "timeout", false},
		{&proxy.BadResponseError{Reason: `101 switching to "x" when "" was requested`}, 502, "sandbox_bad_response", false},
		{&proxy.BodyReadError{Err: errors.New("chunked line ends with bare LF")}, 400, "bad_request", false},
		{&proxy.BodyReadError{Err: io.ErrUnexpectedEOF}, 400, "bad_request", false},
		{&proxy.BodyReadError{Err: &http.MaxBytesError{Limit: 1}}, 413, "too_large", false},
		{context.DeadlineExceeded, 504, "timeout", false},
		{&http.MaxBytesError{Limit: 1}, 413, "too_large", false},
		{echo.ErrNotFound, 404, "not_found", false},
		{echo.ErrMethodNotAllowed, 405, "method_not_allowed", false},
		{errors.New("secret internal detail /var/lib/x"), 500, "internal", false},
		{fmt.Errorf("sandbox 0123456789abcdef at /var/lib/x: %w", backend.ErrNotSupported), 501, "not_supported", false},
		{fmt.Errorf("admin: %w", backend.Unsupported("freeze", "no pool")), 501, "not_supported", false},
	}
	for _, c := range cases {
		got := statusOf(c.err)
		if got.status != c.status || got.code != c.code || (got.retryAfter > 0) != c.retry {
			t.Errorf("%v: got %d %s retry=%d, want %d %s retry=%v", c.err, got.status, got.code, got.retryAfter, c.status, c.code, c.retry)
		}
		if strings.Contains(got.message, "/var/lib") || strings.Contains(got.message, "redis") && got.code != "state_unavailable" {
			t.Errorf("%v: internal text leaked into %q", c.err, got.message)
		}
	}
	// A named 501 says what is missing and why, and nothing else.
	if got := statusOf(fmt.Errorf("sandbox 0123456789abcdef: %w", backend.Unsupported("freeze", "no pool"))); got.message != "freeze is not supported by this sandbox backend: no pool" {
		t.Errorf("named 501 message %q", got.message)
	}
}

// stubPool fails every call with err: the router's handling of input comes
// before any pool call, and errors map through the table.
type stubPool struct{ err error }

func (s stubPool) Acquire(context.Context, string, string) (Sandbox, pool.Outcome, error) {
	return nil, "", s.err
}
func (s stubPool) Reacquire(context.Context, Sandbox) (Sandbox, error) { return nil, s.err }
func (s stubPool) Route(context.Context, string, pool.Owner) (Sandbox, pool.Outcome, error) {
	return nil, "", s.err
}
func (s stubPool) Record(context.Context, string) (state.Record, bool, error) {
	return state.Record{}, false, s.err
}
func (s stubPool) Release(context.Context, string, string) error             { return s.err }
func (s stubPool) Destroy(context.Context, string, pool.DestroyReason) error { return s.err }
func (s stubPool) DestroyThread(context.Context, string, string, pool.DestroyReason) error {
	return s.err
}
func (s stubPool) Capability(context.Context, string) (string, error) { return "", s.err }
func (s stubPool) CapabilityRoute(context.Context, string) (Sandbox, pool.Outcome, error) {
	return nil, "", s.err
}
func (s stubPool) PreviewRoute(context.Context, string) (Sandbox, string, pool.Outcome, error) {
	return nil, "", "", s.err
}
func (s stubPool) CreatePreview(context.Context, pool.Identity, int, time.Duration) (string, state.Preview, error) {
	return "", state.Preview{}, s.err
}
func (s stubPool) Previews(context.Context, pool.Identity) ([]pool.ListedPreview, error) {
	return nil, s.err
}
func (s stubPool) RevokePreview(context.Context, string, string) error { return s.err }
func (s stubPool) RotatePreviewKey(context.Context) (uint16, time.Time, error) {
	return 0, time.Time{}, s.err
}
func (s stubPool) Records(context.Context) ([]state.Record, error)        { return nil, s.err }
func (s stubPool) Alive(context.Context, state.Record) (bool, error)      { return false, s.err }
func (s stubPool) SetAlias(context.Context, string, string, string) error { return s.err }
func (s stubPool) Alias(context.Context, string, string) (string, bool, error) {
	return "", false, s.err
}
func (s stubPool) DeleteAlias(context.Context, string, string) error { return s.err }
func (s stubPool) AliasesBySandbox(context.Context, string) (map[string]string, error) {
	return nil, s.err
}
func (s stubPool) SetEgress(context.Context, string, backend.Egress) (bool, error) {
	return false, s.err
}
func (s stubPool) Templates() ([]pool.Template, string)                           { return nil, "" }
func (s stubPool) CheckOptions(pool.Options) error                                { return s.err }
func (s stubPool) SetOptions(context.Context, string, string, pool.Options) error { return s.err }
func (s stubPool) Options(context.Context, string) (pool.Options, error) {
	return pool.Options{}, s.err
}

func TestRequestsMapToStatuses(t *testing.T) {
	t.Parallel()
	unavailable := stubPool{err: fmt.Errorf("%w: x", pool.ErrState)}
	srv := httptest.NewServer(New(Deps{Pool: unavailable, Aliases: unavailable}))
	defer srv.Close()
	cases := []struct {
		method, path string
		hdr          map[string]string
		status       int
	}{
		{"GET", "/threads/ok/v1/sandbox", nil, 503},
		{"GET", "/threads/a%2Fb/v1/sandbox", nil, 400},
		{"GET", "/threads/" + strings.Repeat("x", 129) + "/v1/sandbox", nil, 400},
		{"GET", "/sandboxes/NOTHEX/v1/sandbox", nil, 400},
		{"GET", "/sandboxes/0123456789abcdef/v1/sandbox", nil, 503},
		{"PUT", "/threads/..%2e/sandbox", nil, 400},
		{"GET", "/nope", nil, 404},
		{"POST", "/healthz", nil, 405},
		{"GET", "/healthz", nil, 200},
		{"POST", "/threads/ok/v1/shell/exec", map[string]string{"Origin": "https://evil.example"}, 403},
		{"POST", "/threads/ok/v1/shell/exec", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"GET", "/api/sandboxes/a%2Fb", nil, 400},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		for k, v := range c.hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, resp.StatusCode, body, c.status)
		}
		if c.status != 200 && !strings.HasPrefix(string(body), `{"error":{"code":`) {
			t.Errorf("%s %s: not a JSON error: %s", c.method, c.path, body)
		}
		if c.status == 503 && resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s: 503 without Retry-After", c.method, c.path)
		}
	}
	// Same origin passes the check (and reaches the pool, which is down).
	req, _ := http.NewRequest("GET", srv.URL+"/threads/ok/v1/sandbox", nil)
	req.Header.Set("Origin", srv.URL)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("same-origin request: %d", resp.StatusCode)
	}
}

func TestPanicBecomesJSON500(t *testing.T) {
	t.Parallel()
	rt := New(Deps{Pool: stubPool{}, Aliases: stubPool{}})
	rt.echo.GET("/boom", func(echo.Context) error { panic("kaboom /secret/path") })
	rec := httptest.NewRecorder()
	rt.ServeHTTP(rec, httptest.NewRequest("GET", "http://localhost/boom", nil))
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "secret") || !strings.Contains(rec.Body.String(), `"internal"`) {
		t.Fatalf("panic answer: %d %s", rec.Code, rec.Body.String())
	}
}

func TestUpstreamPathDoesNotAllocate(t *testing.T) {
	thread := "thread-1"
	path, raw := "/threads/thread-1/v1/file/read", "/threads/thread-1/v1/file%2Fread"
	allocs := testing.AllocsPerRun(1000, func() {
		if identity.ValidThread(thread) != nil {
			t.Fatal("invalid")
		}
		p, r := upstreamPath(path, raw, len("/threads/")+len(thread))
		if p != "/v1/file/read" || r != "/v1/file%2Fread" {
			t.Fatal(p, r)
		}
	})
	if allocs != 0 {
		t.Fatalf("route parse allocates %.1f times", allocs)
	}
}

func FuzzRoutes(f *testing.F) {
	for _, s := range []string{"/threads/a/v1/x", "/threads/../v1", "/sandboxes/0123456789abcdef/v1/", "/threads/%00/sandbox", "/api/sandboxes/x"} {
		f.Add("GET", s)
	}
	rt := New(Deps{Pool: stubPool{err: pool.ErrNotFound}, Aliases: stubPool{}})
	f.Fuzz(func(t *testing.T, method, path string) {
		req, err := http.NewRequest(method, "http://gw"+path, nil)
		if err != nil {
			return // not a request a client could send
		}
		rec := httptest.NewRecorder()
		rt.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %q: %d %s", method, path, rec.Code, rec.Body.String())
		}
	})
}
