// Package tracing sets up OpenTelemetry tracing for a Sink process from the
// standard OTEL_* environment variables. Tracing is off unless they enable
// an exporter; then spans go through a batch span processor to the exporter
// that go.opentelemetry.io/contrib/exporters/autoexport builds (OTLP over
// HTTP or gRPC, or the console), with the resource service.name "sink"
// (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override it) and the W3C
// TraceContext and Baggage propagators.
//
// The other adapters take a trace.TracerProvider in their configuration;
// with tracing off it is a no-op provider, which they recognise (IsNoop) so
// that the request path does no tracing work at all.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	"github.com/sink-io/sink/internal/spans"
)

// ServiceName is the default service.name of Sink's spans.
const ServiceName = "sink"

// Enabled reports whether the environment (read through getenv) enables
// trace export: OTEL_SDK_DISABLED is not "true", and OTEL_TRACES_EXPORTER
// is set to something other than "none" or an OTLP endpoint is set
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if e := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); e != "" {
		return !strings.EqualFold(e, "none")
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Propagator is the W3C TraceContext and Baggage propagator that Sink uses
// on gRPC and in Kafka message metadata.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Setup returns the process's tracer provider and its shutdown function.
// When Enabled(getenv) is false it returns a no-op provider and a shutdown
// that does nothing, and changes no global state. Otherwise it builds the
// exporter named by the environment (autoexport reads the process
// environment; no connection is made yet), a batch span processor and the
// resource, and sets the provider and Propagator as OpenTelemetry's
// globals. Shutdown flushes the spans still buffered within ctx.
func Setup(ctx context.Context, getenv func(string) string) (trace.TracerProvider, func(context.Context) error, error) {
	if !Enabled(getenv) {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot create the trace exporter from OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_*: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", ServiceName)),
		// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
		// override the default name.
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return nil, nil, fmt.Errorf("cannot build the trace resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator())
	shutdown := func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("cannot flush and stop the tracer provider: %w", err)
		}
		return nil
	}
	return tp, shutdown, nil
}

// IsNoop reports whether tp records nothing: nil or OpenTelemetry's no-op
// provider (what Setup returns with tracing off). Adapters skip their
// tracing work for it.
func IsNoop(tp trace.TracerProvider) bool { return !spans.Recording(tp) }

// Destination describes where enabled tracing exports to, for the start-up
// log: the exporter and the OTLP endpoint, as the environment names them.
func Destination(getenv func(string) string) []any {
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	return []any{"exporter", getenv("OTEL_TRACES_EXPORTER"), "otlp_endpoint", endpoint}
}

// GRPCServerOptions returns the gRPC server options that make a server
// span per RPC with tp (OpenTelemetry's stats handler), none when tp
// records nothing (the server then does no tracing work).
func GRPCServerOptions(tp trace.TracerProvider) []grpc.ServerOption {
	if IsNoop(tp) {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(Propagator())))}
}
