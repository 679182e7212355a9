// Package sandboxtrace is the sandbox server with OpenTelemetry tracing, as
// `gateway sandbox` runs it: with the gateway's OTEL_* variables (a plain
// process sandbox inherits them) its spans continue the gateway's traces
// (traceparent). It lives apart from package sandbox so that the sandbox's
// own binary (cmd/sandgate-sandbox), which isolated sandboxes run (they
// have no network to export spans on), links none of it.
package sandboxtrace

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/telemetry"
)

// Main is sandbox.Main with tracing when the environment turns it on.
func Main(ctx context.Context, args []string) error {
	return sandbox.Run(ctx, args, sandbox.Tracing{Log: telemetry.WithTraceIDs, Start: start})
}

func start(ctx context.Context, log *slog.Logger) (func(http.Handler) http.Handler, func(context.Context) error) {
	host, _ := os.Hostname()
	tracing, err := telemetry.SetupTracing(ctx, telemetry.Resource{Service: "sandgate-sandbox",
		Instance: fmt.Sprintf("%s-%d", host, os.Getpid()), FixedService: true}, log)
	if err != nil {
		log.Warn("tracing off: bad OTEL_* configuration", "err", err)
	}
	return func(h http.Handler) http.Handler { return telemetry.ServerSpans(tracing, h) }, tracing.Shutdown
}
