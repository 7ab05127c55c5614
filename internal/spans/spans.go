// Package spans holds what the adapters share for OpenTelemetry: whether a
// tracer provider records at all (with OpenTelemetry's no-op provider they
// do no tracing work), and the client span of one storage call, the same
// for every storage adapter: db.system.name, db.operation.name
// ("read" or "write": the storage call, which may be several database
// commands), db.operation.batch.size, sink.storage.failed_operations, and an
// error status for the first failure that is not an expected outcome (a
// missing record, an existing one, a failed precondition, an applied or
// superseded mutation, invalid input).
package spans

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sink-io/sink/domain"
)

// Recording reports whether tp records spans: false for nil and for
// OpenTelemetry's no-op provider (what adapters/tracing.Setup returns with
// tracing off).
func Recording(tp trace.TracerProvider) bool {
	switch tp.(type) {
	case nil, noop.TracerProvider, *noop.TracerProvider:
		return false
	}
	return true
}

// Tracer returns tp's tracer for the instrumentation scope, or nil when tp
// records nothing (see Recording): then StartStorageCall makes no span and
// costs nothing, and other callers skip their tracing work.
func Tracer(tp trace.TracerProvider, scope string) trace.Tracer {
	if !Recording(tp) {
		return nil
	}
	return tp.Tracer(scope)
}

// StartStorageCall starts the span of one storage call of system (e.g. "mongodb") with
// n operations; the span is nil when tracer is.
func StartStorageCall(ctx context.Context, tracer trace.Tracer, system, op string, n int) (context.Context, trace.Span) {
	if tracer == nil {
		return ctx, nil
	}
	return tracer.Start(ctx, op+" "+system, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("db.system.name", system),
		attribute.String("db.operation.name", op),
		attribute.Int("db.operation.batch.size", n),
	))
}

// EndStorageCall ends a storage call's span (nothing when it is nil) with the outcome of its
// results: errOf returns each result's error.
func EndStorageCall[R any](span trace.Span, results []R, errOf func(R) error) {
	if span == nil {
		return
	}
	failed := 0
	var first error
	for _, r := range results {
		err := errOf(r)
		if err == nil {
			continue
		}
		failed++
		if first == nil && !expected(err) {
			first = err
		}
	}
	if failed > 0 {
		span.SetAttributes(attribute.Int("sink.storage.failed_operations", failed))
	}
	if first != nil {
		span.RecordError(first)
		span.SetStatus(codes.Error, domain.AsError(first).Code.String())
	}
	span.End()
}

// expected reports the errors that are outcomes of a storage operation,
// not failures of the call.
func expected(err error) bool {
	switch domain.AsError(err).Code {
	case domain.CodeNotFound, domain.CodeAlreadyExists, domain.CodeRevisionMismatch, domain.CodeAlreadyApplied, domain.CodeSuperseded, domain.CodeInvalidArgument:
		return true
	}
	return false
}
