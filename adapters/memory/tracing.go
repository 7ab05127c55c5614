package memory

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/sink-io/sink/internal/spans"
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
		s.tracer = spans.Tracer(tp, tracerName)
	}
}

// startSpan starts the span of one storage call; span is nil when tracing
// is off.
func (s *Store) startSpan(ctx context.Context, op string, n int) (context.Context, trace.Span) {
	return spans.StartStorageCall(ctx, s.tracer, "memory", op, n)
}

func endReadSpan(span trace.Span, out []ports.ReadResult) {
	spans.EndStorageCall(span, out, func(r ports.ReadResult) error { return r.Err })
}

func endWriteSpan(span trace.Span, out []ports.WriteResult) {
	spans.EndStorageCall(span, out, func(r ports.WriteResult) error { return r.Err })
}
