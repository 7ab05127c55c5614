package bootstrap

import (
	"context"
	"log/slog"
	"os"
	"slices"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/tracing"
)

// TracingModule provides the process's trace.TracerProvider from the
// standard OTEL_* variables (adapters/tracing.Setup: a no-op provider
// unless they enable an exporter) and flushes and stops it on stop. With
// tracing on, the gRPC server gets OpenTelemetry's stats handler (a server
// span per RPC); the storage, the mutation queue and the worker take the
// provider from the graph.
func TracingModule() fx.Option {
	return fx.Options(
		fx.Module("tracing", fx.Provide(newTracerProvider)),
		// At the root, so that it applies to ObservabilityModule's value.
		fx.Decorate(traceGRPC),
	)
}

// TracerProvider replaces the process's tracer provider with tp (tests: an
// SDK provider with an in-memory exporter or span recorder). The caller
// owns tp and shuts it down.
func TracerProvider(tp trace.TracerProvider) fx.Option {
	return fx.Decorate(func(trace.TracerProvider) trace.TracerProvider { return tp })
}

// newTracerProvider runs tracing.Setup and shuts the provider down on stop,
// after everything that makes spans has stopped (it is built before them).
func newTracerProvider(lc fx.Lifecycle, log *slog.Logger) (trace.TracerProvider, error) {
	tp, shutdown, err := tracing.Setup(context.Background(), os.Getenv)
	if err != nil {
		return nil, err
	}
	if !tracing.IsNoop(tp) {
		log.Info("tracing is on", tracing.Destination(os.Getenv)...)
	}
	lc.Append(fx.Hook{OnStop: shutdown})
	return tp, nil
}

// traceGRPC adds OpenTelemetry's gRPC server stats handler to the
// observability options when tracing is on (with it off the server does no
// tracing work).
func traceGRPC(o GRPCObservability, tp trace.TracerProvider) GRPCObservability {
	o.Options = append(slices.Clip(o.Options), tracing.GRPCServerOptions(tp)...)
	return o
}
