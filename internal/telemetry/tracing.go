package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// Tracing is this process's OpenTelemetry tracing. A nil *Tracing means
// tracing is off; its methods are then no-ops.
type Tracing struct {
	provider   *sdktrace.TracerProvider
	propagator propagation.TextMapPropagator
}

// Resource names the process on every span it exports.
type Resource struct {
	// Service is service.name unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES name another.
	Service string
	// Instance is service.instance.id (the replica's instance name).
	Instance string
	// FixedService keeps Service even when the environment names another:
	// the sandbox server inherits the gateway's OTEL_* variables and must
	// not report itself as the gateway.
	FixedService bool
}

// Exporter protocols (OTEL_EXPORTER_OTLP_PROTOCOL values).
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// SetupTracing turns tracing on when the standard OTEL_* variables ask for
// an exporter, and returns nil (off) otherwise. Everything else the SDK
// reads from the same variables itself: endpoint, headers, TLS, timeout,
// compression (OTEL_EXPORTER_OTLP_*), sampler (OTEL_TRACES_SAMPLER and
// _ARG, default parentbased_always_on), batching (OTEL_BSP_*), resource
// (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME). Shutdown flushes.
func SetupTracing(ctx context.Context, res Resource, log *slog.Logger) (*Tracing, error) {
	protocol, err := ExporterProtocol(os.Getenv)
	if err != nil || protocol == "" {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	switch protocol {
	case ProtocolGRPC:
		exp, err = otlptracegrpc.New(ctx)
	default:
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	r, err := buildResource(ctx, res)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}
	if log != nil {
		// Export failures go to the log, not to the standard logger.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("opentelemetry export", "err", err)
		}))
		log.Info("tracing on", "protocol", protocol, "sampler", os.Getenv("OTEL_TRACES_SAMPLER"),
			"sampler_arg", os.Getenv("OTEL_TRACES_SAMPLER_ARG"))
	}
	return NewTracing(sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(r))), nil
}

// NewTracing wraps a provider built elsewhere (tests record spans in
// memory). Its propagator reads and writes W3C trace context and baggage.
func NewTracing(tp *sdktrace.TracerProvider) *Tracing {
	return &Tracing{provider: tp,
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
}

// ExporterProtocol decides from the environment whether traces are exported
// and how: "" is off. Off unless OTEL_TRACES_EXPORTER=otlp, or it is unset
// and an OTLP endpoint is; OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn it off.
func ExporterProtocol(getenv func(string) string) (string, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return "", nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return "", nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return "", nil
		}
	case "otlp":
	default:
		return "", fmt.Errorf("OTEL_TRACES_EXPORTER=%q: only otlp and none are supported", exp)
	}
	protocol := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if protocol == "" {
		protocol = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch protocol {
	case "", ProtocolHTTP:
		return ProtocolHTTP, nil
	case ProtocolGRPC:
		return ProtocolGRPC, nil
	}
	return "", fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: only %s and %s are supported", protocol, ProtocolHTTP, ProtocolGRPC)
}

// buildResource merges, later winning: defaults, then the environment, then
// (FixedService) the service name again.
func buildResource(ctx context.Context, res Resource) (*resource.Resource, error) {
	opts := []resource.Option{
		resource.WithAttributes(semconv.ServiceName(res.Service), semconv.ServiceVersion(version()),
			semconv.ServiceInstanceID(res.Instance)),
		resource.WithFromEnv(),
	}
	if res.FixedService {
		opts = append(opts, resource.WithAttributes(semconv.ServiceName(res.Service)))
	}
	r, err := resource.New(ctx, opts...)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return r, nil
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// TracerProvider is the provider, or nil when tracing is off.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.provider
}

// Tracer is Sandgate's tracer, or nil when tracing is off.
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.provider.Tracer(Scope)
}

// Propagator reads and writes W3C trace context and baggage headers.
func (t *Tracing) Propagator() propagation.TextMapPropagator {
	if t == nil {
		return nil
	}
	return t.propagator
}

// Shutdown flushes buffered spans and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("flush traces: %w", err)
	}
	return nil
}
