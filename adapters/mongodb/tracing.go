package mongodb

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sink-io/sink/internal/spans"
	"github.com/sink-io/sink/ports"
)

// Tracing. There is no OpenTelemetry instrumentation of the driver v2, so
// with Options.TracerProvider the Store makes one client span per storage
// call (Read, Write; not Ping), whatever MongoDB commands the call sends:
// db.system.name "mongodb", db.operation.name "read" or "write" (the
// storage call, which can be several commands), db.operation.batch.size
// (the call's operations), db.namespace and db.collection.name when the
// call touches one collection, sink.storage.failed_operations, and an
// error status for the first failure that is not an expected outcome (a
// missing record or a failed precondition is not).

// tracerName is the instrumentation scope of the Store's spans.
const tracerName = "github.com/sink-io/sink/adapters/mongodb"

// tracerOf returns the Store's tracer from tp, or nil when tp records
// nothing (nil or the no-op provider).
func tracerOf(tp trace.TracerProvider) trace.Tracer { return spans.Tracer(tp, tracerName) }

// startSpan starts the span of one storage call; span is nil when tracing
// is off.
func (s *Store) startSpan(ctx context.Context, op string, n int) (context.Context, trace.Span) {
	return spans.StartStorageCall(ctx, s.tracer, "mongodb", op, n)
}

// spanTargets sets the namespace (database) and collection of a call's span
// when all of its operations go to one of them.
func spanTargets(span trace.Span, op string, n int, targetAt func(int) target) {
	if n == 0 {
		return
	}
	t := targetAt(0)
	sameDB, sameColl := true, true
	for i := 1; i < n && (sameDB || sameColl); i++ {
		u := targetAt(i)
		if u.Database != t.Database {
			sameDB, sameColl = false, false
		} else if u.Collection != t.Collection {
			sameColl = false
		}
	}
	if sameDB {
		span.SetAttributes(attribute.String("db.namespace", t.Database))
	}
	if sameColl {
		span.SetAttributes(attribute.String("db.collection.name", t.Collection))
		// The semantic conventions' name when the collection is known.
		span.SetName(op + " " + t.String())
	}
}

func endReadSpan(span trace.Span, out []ports.ReadResult) {
	spans.EndStorageCall(span, out, func(r ports.ReadResult) error { return r.Err })
}

func endWriteSpan(span trace.Span, out []ports.WriteResult) {
	spans.EndStorageCall(span, out, func(r ports.WriteResult) error { return r.Err })
}
