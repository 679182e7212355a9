package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of Sandgate's own spans.
const Scope = "github.com/sandgate/sandgate"

// Attribute keys of Sandgate's spans. No metric carries the per-sandbox
// ones: they are for traces only.
const (
	KeySandboxID = attribute.Key("sandbox.id")
	KeyThreadID  = attribute.Key("thread.id")
	KeyBackend   = attribute.Key("backend")
	KeyOutcome   = attribute.Key("outcome")
)

// noopSpan is returned when nothing is traced: an interface value made once,
// so returning it allocates nothing.
var noopSpan = trace.SpanFromContext(context.Background())

// Child starts a span under ctx's span when that span is recording (tracing
// on and this trace sampled), from the same provider. Otherwise it returns
// ctx and a no-op span and allocates nothing, so code on a request path pays
// one context lookup when tracing is off. Pass options only where the call is
// not on a hot path: building them allocates whether or not a span starts.
func Child(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noopSpan
	}
	return parent.TracerProvider().Tracer(Scope).Start(ctx, name, opts...)
}

// Root starts a span with no parent (a background pass) when tracer is set;
// with a nil tracer (tracing off) it returns ctx and a no-op span.
func Root(ctx context.Context, tracer trace.Tracer, name string) (context.Context, trace.Span) {
	if tracer == nil {
		return ctx, noopSpan
	}
	return tracer.Start(ctx, name, trace.WithNewRoot())
}

// Recording reports whether ctx's span records: attributes worth building.
func Recording(ctx context.Context) bool { return trace.SpanFromContext(ctx).IsRecording() }

// Fail marks span failed with err (nil: nothing).
func Fail(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, "")
}

// SandboxAttrs are the identity attributes of a span about one sandbox.
func SandboxAttrs(sid, thread, backend string) []attribute.KeyValue {
	return []attribute.KeyValue{KeySandboxID.String(sid), KeyThreadID.String(thread), KeyBackend.String(backend)}
}
