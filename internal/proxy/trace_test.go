package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const clientParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// tracedGateway serves p in front of tg, starting each request's span with
// tp (the router's otelecho does this in the gateway); nil tp = tracing off.
func tracedGateway(t *testing.T, p *Proxy, tg *target, tp trace.TracerProvider) string {
	t.Helper()
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.Serve(w, r, tg, r.URL.Path, r.URL.RawPath, "")
	})
	if tp != nil {
		serve := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, span := tp.Tracer("test").Start(r.Context(), "request")
			defer span.End()
			serve.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

func TestTraceContextReachesTheSandbox(t *testing.T) {
	t.Parallel()
	seen := make(chan string, 1)
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Traceparent")
		_, _ = io.WriteString(w, strings.Repeat("x", 100))
	}))
	rec := tracetest.NewSpanRecorder()
	sampled := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))

	for _, c := range []struct {
		name  string
		tp    trace.TracerProvider
		check func(t *testing.T, got string)
	}{
		{"tracing off: the client's header passes untouched", nil, func(t *testing.T, got string) {
			if got != clientParent {
				t.Errorf("traceparent %q, want the client's", got)
			}
		}},
		{"not sampled: the gateway's context, flags 00, no span", unsampled, func(t *testing.T, got string) {
			if !strings.HasPrefix(got, "00-") || !strings.HasSuffix(got, "-00") || got == clientParent {
				t.Errorf("traceparent %q", got)
			}
		}},
		{"sampled: the proxy span is the sandbox's parent", sampled, func(t *testing.T, got string) {
			spans := rec.Ended()
			var proxySpan sdktrace.ReadOnlySpan
			for _, s := range spans {
				if s.Name() == spanProxy {
					proxySpan = s
				}
			}
			if proxySpan == nil {
				t.Fatalf("no proxy span in %d spans", len(spans))
			}
			want := "00-" + proxySpan.SpanContext().TraceID().String() + "-" + proxySpan.SpanContext().SpanID().String() + "-01"
			if got != want || proxySpan.SpanKind() != trace.SpanKindClient {
				t.Errorf("traceparent %q, want %q (kind %v)", got, want, proxySpan.SpanKind())
			}
		}},
	} {
		tg := newTarget(t, up.URL)
		url := tracedGateway(t, New(Config{}, &fixedResolver{}, errWriter, nil), tg, c.tp)
		req, _ := http.NewRequestWithContext(context.Background(), "GET", url+"/v1/x", nil)
		req.Header.Set("Traceparent", clientParent)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t.Run(c.name, func(t *testing.T) { c.check(t, <-seen) })
	}
}
