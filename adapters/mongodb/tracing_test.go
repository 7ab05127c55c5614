package mongodb_test

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/ports"
)

// Read and Write calls are client spans, children of the caller's span,
// with the semantic conventions' database attributes.
func TestStorageCallsAreSpans(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	db := freshDatabase(t, c)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := newStore(t, c, mongodb.Options{TracerProvider: tp})
	ctx, parent := tp.Tracer("test").Start(ctxT(t), "caller")
	at := func(ds, k string) domain.Address {
		return domain.Address{Namespace: db, Dataset: ds, Key: domain.StringKey(k)}
	}
	doc := bsonDoc(t, bson.D{{Key: "v", Value: 1}})
	for i, r := range s.Write(ctx, []ports.WriteOp{
		{Kind: ports.WritePut, Address: at("a", "k1"), Document: doc},
		{Kind: ports.WritePut, Address: at("a", "k2"), Document: doc},
	}) {
		if r.Err != nil {
			t.Fatalf("write %d: %v", i, r.Err)
		}
	}
	// A create of an existing record is an outcome, not a failed call.
	s.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: at("a", "k1"), Document: doc, Condition: ports.Condition{Kind: ports.ConditionAbsent}}})
	s.Read(ctx, []domain.Address{at("a", "k1"), at("b", "k1")})
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	s.Read(canceled, []domain.Address{at("a", "k1")})
	parent.End()

	spans := rec.Ended()
	if len(spans) != 5 {
		t.Fatalf("%d spans, want 5", len(spans))
	}
	for i, want := range []struct {
		name   string
		attrs  map[string]string
		status codes.Code
	}{
		{"write " + db + ".a", map[string]string{"db.operation.name": "write", "db.operation.batch.size": "2", "db.namespace": db, "db.collection.name": "a"}, codes.Unset},
		{"write " + db + ".a", map[string]string{"db.operation.name": "write", "db.operation.batch.size": "1", "sink.storage.failed_operations": "1"}, codes.Unset},
		// Two collections: no collection name.
		{"read mongodb", map[string]string{"db.operation.name": "read", "db.operation.batch.size": "2", "db.namespace": db, "db.collection.name": ""}, codes.Unset},
		{"read " + db + ".a", map[string]string{"db.operation.name": "read", "sink.storage.failed_operations": "1"}, codes.Error},
	} {
		sp := spans[i]
		got := map[string]string{}
		for _, kv := range sp.Attributes() {
			got[string(kv.Key)] = kv.Value.String()
		}
		if sp.Name() != want.name || sp.SpanKind() != trace.SpanKindClient || sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %d: %q kind %v parent %s, want %q, client, %s", i, sp.Name(), sp.SpanKind(), sp.Parent().SpanID(), want.name, parent.SpanContext().SpanID())
		}
		if got["db.system.name"] != "mongodb" {
			t.Errorf("span %d: db.system.name %q", i, got["db.system.name"])
		}
		for k, v := range want.attrs {
			if got[k] != v {
				t.Errorf("span %d: %s = %q, want %q (attributes %v)", i, k, got[k], v, got)
			}
		}
		if sp.Status().Code != want.status {
			t.Errorf("span %d: status %v, want %v", i, sp.Status(), want.status)
		}
	}
}
