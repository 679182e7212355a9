package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sandgate/sandgate/internal/pool"
	"github.com/sandgate/sandgate/internal/telemetry"
)

func get(t *testing.T, srv *httptest.Server, path string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestDataPlaneRequestsAreCountedAndLogged(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	down := stubPool{err: fmt.Errorf("%w: x", pool.ErrState)}
	rt := New(Deps{Pool: down, Aliases: down, Metrics: telemetry.NewMetrics(),
		Log: telemetry.NewLogger("json", "info", &logs)})
	srv := httptest.NewServer(rt)
	defer srv.Close()

	if code, _ := get(t, srv, "/threads/t-1/v1/sandbox", "Authorization", "Bearer never-logged"); code != 503 {
		t.Fatalf("status %d", code)
	}
	if code, _ := get(t, srv, "/sandboxes/NOTHEX/v1/x"); code != 400 {
		t.Fatalf("status %d", code)
	}
	code, body := get(t, srv, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`sandgate_proxy_requests_total{class="5xx",route="thread"} 1`,
		`sandgate_proxy_requests_total{class="4xx",route="sandbox"} 1`,
		`sandgate_proxy_request_duration_seconds_count{route="thread"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	var access []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %s", line)
		}
		if m["msg"] == "proxied" {
			access = append(access, m)
		}
	}
	if len(access) != 2 || access[0]["status"] != float64(503) || access[0]["thread"] != "t-1" ||
		access[0]["route"] != "thread" || access[1]["route"] != "sandbox" || access[1]["status"] != float64(400) {
		t.Fatalf("access lines: %v", access)
	}
	if strings.Contains(logs.String(), "never-logged") {
		t.Fatal("a credential reached the log")
	}
}

func TestAccountingWithoutAccessLogDoesNotAllocate(t *testing.T) {
	rt := New(Deps{Pool: stubPool{}, Aliases: stubPool{}, Metrics: telemetry.NewMetrics(),
		Log: telemetry.NewLogger("json", "warn", io.Discard)})
	c := rt.echo.NewContext(httptest.NewRequest("GET", "/threads/t/v1/sandbox", nil), httptest.NewRecorder())
	c.Response().Status = 200
	route := &pool.Route{SandboxID: "0123456789abcdef", Thread: "t", Backend: "process"}
	allocs := testing.AllocsPerRun(1000, func() {
		rt.account(c, telemetry.RouteThread, proxied{route: route, outcome: pool.OutcomeHit}, time.Millisecond)
	})
	if allocs != 0 {
		t.Fatalf("accounting a request allocates %.1f times", allocs)
	}
}

func TestRequestSpansContinueTheClientTrace(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	down := stubPool{err: fmt.Errorf("%w: x", pool.ErrState)}
	rt := New(Deps{Pool: down, Aliases: down, Metrics: telemetry.NewMetrics(),
		Tracing: telemetry.NewTracing(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))})
	srv := httptest.NewServer(rt)
	defer srv.Close()
	get(t, srv, "/threads/t-1/v1/sandbox", "Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	get(t, srv, "/healthz")
	get(t, srv, "/metrics")
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1 (probes and scrapes are not traced)", len(spans))
	}
	s := spans[0]
	if s.Name() != "GET /threads/:thread/v1/*" || s.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		s.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("span %q trace %s parent %s", s.Name(), s.SpanContext().TraceID(), s.Parent().SpanID())
	}
	if s.Status().Code.String() != "Error" {
		t.Errorf("a 503 span has status %v", s.Status())
	}
}

// BenchmarkAccount is the per-request accounting of a cached request with
// the access log off (log level warn): metrics, no span, no log line.
func BenchmarkAccount(b *testing.B) {
	rt := New(Deps{Pool: stubPool{}, Aliases: stubPool{}, Metrics: telemetry.NewMetrics(),
		Log: telemetry.NewLogger("json", "warn", io.Discard)})
	c := rt.echo.NewContext(httptest.NewRequest("GET", "/threads/t/v1/sandbox", nil), httptest.NewRecorder())
	c.Response().Status = 200
	route := &pool.Route{SandboxID: "0123456789abcdef", Thread: "t", Backend: "process"}
	b.ReportAllocs()
	for range b.N {
		rt.account(c, telemetry.RouteThread, proxied{route: route, outcome: pool.OutcomeHit}, time.Millisecond)
	}
}
