package memory

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

func attrs(sp sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range sp.Attributes() {
		m[kv.Key] = kv.Value.String()
	}
	return m
}

// Storage calls are client spans, children of the caller's span; expected
// outcomes (a failed precondition) are counted, not errors; a canceled
// call is an error.
func TestStorageCallsAreSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := New(WithTracerProvider(tp))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "caller")
	a := domain.Address{Store: "primary", Namespace: "ns", Dataset: "ds", Key: domain.StringKey("k")}
	doc := domain.Document{ContentType: "application/json", Data: []byte(`{}`)}
	s.Write(ctx, []ports.WriteOp{
		{Kind: ports.WritePut, Address: a, Document: doc},
		{Kind: ports.WritePut, Address: a, Document: doc, Condition: ports.Condition{Kind: ports.ConditionAbsent}},
	})
	s.Read(ctx, []domain.Address{a})
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	s.Read(canceled, []domain.Address{a})
	parent.End()

	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	for i, want := range []struct {
		name, op, size, failed string
		status                 codes.Code
	}{
		{"write memory", "write", "2", "1", codes.Unset},
		{"read memory", "read", "1", "", codes.Unset},
		{"read memory", "read", "1", "1", codes.Error},
	} {
		sp := spans[i]
		got := attrs(sp)
		if sp.Name() != want.name || sp.SpanKind() != trace.SpanKindClient || sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %d: %q kind %v parent %s", i, sp.Name(), sp.SpanKind(), sp.Parent().SpanID())
		}
		if got["db.system.name"] != "memory" || got["db.operation.name"] != want.op || got["db.operation.batch.size"] != want.size || got["sink.storage.failed_operations"] != want.failed {
			t.Errorf("span %d attributes %v", i, got)
		}
		if sp.Status().Code != want.status {
			t.Errorf("span %d status %v, want %v", i, sp.Status(), want.status)
		}
	}
}

func TestNoSpansWithoutAProvider(t *testing.T) {
	if s := New(); s.tracer != nil {
		t.Fatal("New() traces")
	}
	if s := New(WithTracerProvider(nil)); s.tracer != nil {
		t.Fatal("WithTracerProvider(nil) traces")
	}
}
