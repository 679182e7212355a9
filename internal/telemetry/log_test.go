package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestLogLinesCarryTraceIDs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := NewLogger("json", "info", &buf).With("backend", "process")
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled,
	})
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "traced", "sandbox_id", "0123456789abcdef")
	log.Info("untraced")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	var traced, untraced map[string]any
	if json.Unmarshal(lines[0], &traced) != nil || json.Unmarshal(lines[1], &untraced) != nil {
		t.Fatalf("not JSON: %s", buf.String())
	}
	if traced["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || traced["span_id"] != "00f067aa0ba902b7" ||
		traced["backend"] != "process" || traced["sandbox_id"] != "0123456789abcdef" {
		t.Errorf("traced line: %v", traced)
	}
	if _, ok := untraced["trace_id"]; ok {
		t.Errorf("untraced line has a trace id: %v", untraced)
	}
}
