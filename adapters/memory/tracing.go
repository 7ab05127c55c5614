package memory

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// tracerName is the instrumentation scope of the store's spans.
const tracerName = "github.com/sink-io/sink/adapters/memory"

// Option configures a Store.
type Option func(*Store)

// WithTracerProvider makes a client span per Read and Write call, like the
// MongoDB adapter's (db.system.name "memory", db.operation.name "read" or
// "write", db.operation.batch.size), so that traces can be tested without
// a database. Nil or the no-op provider: no spans, no tracing work.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *Store) {
		switch tp.(type) {
		case nil, noop.TracerProvider, *noop.TracerProvider:
			s.tracer = nil
		default:
			s.tracer = tp.Tracer(tracerName)
		}
	}
}

// startSpan starts the span of one storage call; span is nil when tracing
// is off.
func (s *Store) startSpan(ctx context.Context, op string, n int) (context.Context, trace.Span) {
	if s.tracer == nil {
		return ctx, nil
	}
	return s.tracer.Start(ctx, op+" memory", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("db.system.name", "memory"),
		attribute.String("db.operation.name", op),
		attribute.Int("db.operation.batch.size", n),
	))
}

// endSpan ends a storage call's span: the number of operations that
// failed, and an error status for the first failure that is not an
// expected outcome (a missing record or a failed precondition is not).
func endSpan(span trace.Span, errs []error) {
	failed := 0
	var first error
	for _, err := range errs {
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

func endReadSpan(span trace.Span, out []ports.ReadResult) {
	if span == nil {
		return
	}
	errs := make([]error, len(out))
	for i := range out {
		errs[i] = out[i].Err
	}
	endSpan(span, errs)
}

func endWriteSpan(span trace.Span, out []ports.WriteResult) {
	if span == nil {
		return
	}
	errs := make([]error, len(out))
	for i := range out {
		errs[i] = out[i].Err
	}
	endSpan(span, errs)
}
