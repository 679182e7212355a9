// Package telemetry sets up logs, traces and metrics: the slog logger (JSON,
// text on a terminal, with trace and span ids), OpenTelemetry tracing chosen
// by the standard OTEL_* variables, and the Prometheus metrics of /metrics.
// Every piece is cheap when off: a nil *Tracing or *Metrics is a no-op.
package telemetry

import (
	"context"
	"io"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/term"
)

// NewLogger returns the gateway's slog logger: JSON, or text when format is
// "text" or "auto" on a terminal; records logged with a traced context carry
// trace_id and span_id.
func NewLogger(format, level string, w io.Writer) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	if format == "text" || (format == "auto" && isTerminal(w)) {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(WithTraceIDs(h))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// WithTraceIDs wraps h so a record logged with a context that holds a span
// gets trace_id and span_id, joining the log line to its trace.
func WithTraceIDs(h slog.Handler) slog.Handler { return traceHandler{h} }

type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
