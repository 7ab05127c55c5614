package postgres

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sink-io/sink/internal/spans"
	"github.com/sink-io/sink/ports"
)

// Tracing: with Options.TracerProvider the Store makes one client span per
// storage call (Read, Write; not Ping), like the MongoDB adapter:
// db.system.name "postgresql", db.operation.name "read" or "write",
// db.operation.batch.size, db.namespace (the schema) and
// db.collection.name (the table) when the call touches one table,
// sink.storage.failed_operations, and an error status for the first
// failure that is not an expected outcome.

const tracerName = "github.com/sink-io/sink/adapters/postgres"

func tracerOf(tp trace.TracerProvider) trace.Tracer { return spans.Tracer(tp, tracerName) }

func (s *Store) startSpan(ctx context.Context, op string, n int) (context.Context, trace.Span) {
	return spans.StartStorageCall(ctx, s.tracer, "postgresql", op, n)
}

// spanTargets sets the schema and table of a call's span when all of its
// operations go to one of them.
func spanTargets(span trace.Span, op string, groups []*group) {
	if len(groups) == 0 {
		return
	}
	t := groups[0].t
	sameSchema := true
	for _, g := range groups[1:] {
		if g.t.Schema != t.Schema {
			sameSchema = false
		}
	}
	if sameSchema {
		span.SetAttributes(attribute.String("db.namespace", t.Schema))
	}
	if len(groups) == 1 {
		span.SetAttributes(attribute.String("db.collection.name", t.Table))
		span.SetName(op + " " + t.String())
	}
}

func endReadSpan(span trace.Span, out []ports.ReadResult) {
	spans.EndStorageCall(span, out, func(r ports.ReadResult) error { return r.Err })
}

func endWriteSpan(span trace.Span, out []ports.WriteResult) {
	spans.EndStorageCall(span, out, func(r ports.WriteResult) error { return r.Err })
}
