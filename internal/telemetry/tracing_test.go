package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

func TestExporterProtocol(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		env     map[string]string
		want    string
		wantErr bool
	}{
		{"nothing set: off", nil, "", false},
		{"endpoint: http/protobuf by default", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ProtocolHTTP, false},
		{"traces endpoint alone", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ProtocolHTTP, false},
		{"grpc", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ProtocolGRPC, false},
		{"traces protocol wins", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, ProtocolHTTP, false},
		{"exporter otlp without endpoint: SDK default endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, ProtocolHTTP, false},
		{"exporter none beats an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"}, "", false},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"}, "", false},
		{"unsupported exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "", true},
		{"unsupported protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "", true},
	}
	for _, c := range cases {
		got, err := ExporterProtocol(func(k string) string { return c.env[k] })
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("%s: got %q, %v; want %q, error %v", c.name, got, err, c.want, c.wantErr)
		}
	}
}

// Not parallel: the resource reads OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES from the process environment.
func TestResourceNamesTheReplica(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=staging,service.name=from-attrs")
	t.Setenv("OTEL_SERVICE_NAME", "sandgate-eu")
	for _, c := range []struct {
		name      string
		res       Resource
		wantName  string
		wantInst  string
		wantOther string
	}{
		{"the environment names the gateway", Resource{Service: "sandgate", Instance: "gw-1"}, "sandgate-eu", "gw-1", "staging"},
		{"the sandbox server keeps its own name", Resource{Service: "sandgate-sandbox", Instance: "h-42", FixedService: true},
			"sandgate-sandbox", "h-42", "staging"},
	} {
		r, err := buildResource(context.Background(), c.res)
		if err != nil {
			t.Fatal(err)
		}
		got := map[attribute.Key]string{}
		for _, kv := range r.Attributes() {
			got[kv.Key] = kv.Value.Emit()
		}
		if got["service.name"] != c.wantName || got["service.instance.id"] != c.wantInst ||
			got["deployment.environment.name"] != c.wantOther {
			t.Errorf("%s: %v", c.name, got)
		}
	}
}
