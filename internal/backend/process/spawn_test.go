package process

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandgate/sandgate/internal/sandboxspec"
)

// Not parallel: t.Setenv. The lean binary runs every sandbox but a plain
// one while tracing is on: it cannot trace, and only a plain one could
// export spans.
func TestDefaultBinaryKeepsTracingOfPlainSandboxes(t *testing.T) {
	dir := t.TempDir()
	gateway, lean := filepath.Join(dir, "gateway"), filepath.Join(dir, sandboxspec.ServerBinary)
	for _, f := range []string{gateway, lean} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		exporter, isolation, want string
	}{
		{"", IsolationNone, lean},
		{"", IsolationNamespaces, lean},
		{"otlp", IsolationNamespaces, lean},
		{"otlp", IsolationNone, gateway},
		{"none", IsolationNone, lean},
	} {
		t.Setenv("OTEL_TRACES_EXPORTER", tc.exporter)
		if got := defaultBinary(gateway, tc.isolation); got != tc.want {
			t.Errorf("OTEL_TRACES_EXPORTER=%q, isolation %q: %s, want %s", tc.exporter, tc.isolation, got, tc.want)
		}
	}
	if err := os.Remove(lean); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	if got := defaultBinary(gateway, IsolationNamespaces); got != gateway {
		t.Errorf("without the lean binary: %s, want the gateway", got)
	}
}
