package proxy

import (
	"context"
	"io"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandgate/sandgate/internal/telemetry"
)

// SpanAttributer is an Upstream that describes itself on spans (sandbox id,
// thread, backend).
type SpanAttributer interface {
	SpanAttributes() []attribute.KeyValue
}

// spanProxy is the client span of one upstream attempt.
const spanProxy = "sandgate.proxy"

// traceAttempt starts the client span of one upstream attempt when the
// request is in a sampled trace, and writes the request's W3C trace context
// into the outgoing headers whenever it has one, sampled or not, so the
// sandbox follows the gateway's sampling decision. With tracing off the
// request has no span context: one context lookup, nothing allocated, and a
// traceparent sent by the client passes through untouched.
// The path recorded is the sandbox's (/v1/...), never the upstream's full
// path: an upstream behind another gateway is a capability URL, a credential.
func traceAttempt(req *http.Request, up Upstream, path string, attempt int) trace.Span {
	ctx := req.Context()
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return noSpan
	}
	span := noSpan
	if telemetry.Recording(ctx) {
		ctx, span = telemetry.Child(ctx, spanProxy, trace.WithSpanKind(trace.SpanKindClient))
		span.SetAttributes(semconv.HTTPRequestMethodKey.String(req.Method), semconv.ServerAddress(req.URL.Host),
			semconv.URLPath(path), attribute.Int("sandgate.attempt", attempt))
		if a, ok := up.(SpanAttributer); ok {
			span.SetAttributes(a.SpanAttributes()...)
		}
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	return span
}

// noSpan is the no-op span, made once.
var noSpan = trace.SpanFromContext(context.Background())

// endAttempt records the response on span, which ends when the response
// body is closed (the stream is part of the round trip). An upgrade's body
// is the raw connection and must stay unwrapped: its span ends now.
func endAttempt(span trace.Span, resp *http.Response) *http.Response {
	if !span.IsRecording() {
		return resp
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, "")
	}
	if resp.StatusCode == http.StatusSwitchingProtocols || resp.Body == nil || resp.Body == http.NoBody {
		span.End()
		return resp
	}
	resp.Body = &spanBody{ReadCloser: resp.Body, span: span}
	return resp
}

func failAttempt(span trace.Span, err error) {
	telemetry.Fail(span, err)
	span.End()
}

// spanBody ends the attempt's span when the response body is closed.
type spanBody struct {
	io.ReadCloser
	span trace.Span
	once sync.Once
}

func (b *spanBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { b.span.End() })
	return err
}
