package tracing

import (
	"context"
	"os"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

var otelVars = []string{
	"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
}

// clearOTEL unsets every OTEL_* variable these tests read, restored after t.
func clearOTEL(t *testing.T) {
	for _, k := range otelVars {
		t.Setenv(k, "")
		if err := os.Unsetenv(k); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false},
		{"console", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
		{"otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{"endpoint but exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{"sdk disabled", map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, false},
		{"sdk not disabled", map[string]string{"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "false"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Enabled(func(k string) string { return tc.env[k] }); got != tc.want {
				t.Fatalf("Enabled(%v) = %v, want %v", tc.env, got, tc.want)
			}
		})
	}
}

func TestSetupOffWithoutOTELVariables(t *testing.T) {
	clearOTEL(t)
	tp, shutdown, err := Setup(context.Background(), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tp.(noop.TracerProvider); !ok || !IsNoop(tp) {
		t.Fatalf("Setup without OTEL_* returned %T, want the no-op provider", tp)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestSetupOnWithAnExporter(t *testing.T) {
	for _, env := range []map[string]string{
		{"OTEL_TRACES_EXPORTER": "console"},
		// No connection is made before spans are exported.
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "sink-test"},
	} {
		t.Run("", func(t *testing.T) {
			clearOTEL(t)
			for k, v := range env {
				t.Setenv(k, v)
			}
			tp, shutdown, err := Setup(context.Background(), os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := tp.(*sdktrace.TracerProvider); !ok || IsNoop(tp) {
				t.Fatalf("Setup with %v returned %T, want the SDK provider", env, tp)
			}
			// Nothing was exported, so nothing is sent to the endpoint.
			if err := shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSetupRefusesAnUnknownExporter(t *testing.T) {
	clearOTEL(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "no-such-exporter")
	if _, _, err := Setup(context.Background(), os.Getenv); err == nil {
		t.Fatal("Setup accepted OTEL_TRACES_EXPORTER=no-such-exporter")
	}
}
