// Package storagespan makes the OpenTelemetry client span of one storage
// call, the same for every storage adapter: db.system.name, db.operation.name
// ("read" or "write": the storage call, which may be several database
// commands), db.operation.batch.size, sink.storage.failed_operations, and an
// error status for the first failure that is not an expected outcome (a
// missing record, an existing one, a failed precondition, an applied or
// superseded mutation, invalid input).
package storagespan

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sink-io/sink/domain"
)

// Tracer returns tp's tracer for the instrumentation scope, or nil when tp
// records nothing (nil or the no-op provider): then Start makes no span and
// costs nothing.
func Tracer(tp trace.TracerProvider, scope string) trace.Tracer {
	switch tp.(type) {
	case nil, noop.TracerProvider, *noop.TracerProvider:
		return nil
	}
	return tp.Tracer(scope)
}

// Start starts the span of one storage call of system (e.g. "mongodb") with
// n operations; the span is nil when tracer is.
func Start(ctx context.Context, tracer trace.Tracer, system, op string, n int) (context.Context, trace.Span) {
	if tracer == nil {
		return ctx, nil
	}
	return tracer.Start(ctx, op+" "+system, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("db.system.name", system),
		attribute.String("db.operation.name", op),
		attribute.Int("db.operation.batch.size", n),
	))
}

// End ends a call's span (nothing when it is nil) with the outcome of its
// results: errOf returns each result's error.
func End[R any](span trace.Span, results []R, errOf func(R) error) {
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
