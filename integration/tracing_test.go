package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/sinkprom"
	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// One asynchronous Write is one trace: the gRPC server span, the queue's
// publish span (its child), the worker's process span (the publish span's
// child, across Kafka) and the storage write span (the process span's
// child). The Kafka client's own metrics are on the process's registry.
func TestTracingAsyncWriteIsOneTrace(t *testing.T) {
	asyncSkipShort(t)
	t.Run("memory", func(t *testing.T) {
		testTracingAsyncWrite(t, nil, addr("shop", "orders", "traced"), jsonDoc(`{"n":1}`), "memory")
	})
	t.Run("mongodb", func(t *testing.T) {
		mongo := mongotest.Shared(t)
		data, err := bson.Marshal(bson.D{{Key: "n", Value: 1}})
		if err != nil {
			t.Fatal(err)
		}
		doc := &sinkv1.Document{ContentType: domain.ContentTypeBSON, Data: data}
		testTracingAsyncWrite(t, mongo.SinkEnv(), addr(mongotest.DatabaseName(t), "orders", "traced"), doc, "mongodb")
	})
}

func testTracingAsyncWrite(t *testing.T, env map[string]string, a *sinkv1.RecordAddress, doc *sinkv1.Document, system string) {
	brokers := kafkatest.InProcess(t, kafkatest.Topics(asyncTopic, asyncDLT), kafkatest.Partitions(1))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var metrics *sinkprom.Metrics
	s := asyncStartAll(t, brokers, env, bootstrap.TracerProvider(tp), fx.Populate(&metrics))

	asyncMustAccept(t, s.Client, &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{
		Address: a, Document: doc, Mode: sinkv1.PutMode_PUT_MODE_UPSERT}}})

	// The worker's storage write ends after the write; wait for its span.
	isWrite := func(sp sdktrace.ReadOnlySpan) bool {
		return hasAttr(sp, "db.operation.name", "write") && hasAttr(sp, "db.system.name", system)
	}
	isServer := func(sp sdktrace.ReadOnlySpan) bool {
		return sp.SpanKind() == trace.SpanKindServer && sp.Name() == "sink.v1.Sink/Write"
	}
	var spans []sdktrace.ReadOnlySpan
	// (The server's span ends after its answer left, so it may end after
	// the client has the answer, and even after the worker applied it.)
	eventually(t, 30*time.Second, "the gRPC server span and the worker's storage write span", func() (bool, string) {
		if err := tp.ForceFlush(context.Background()); err != nil {
			return false, err.Error()
		}
		spans = rec.Ended()
		if findSpan(spans, isServer) == nil {
			return false, describeSpans(spans)
		}
		for _, sp := range spans {
			if isWrite(sp) && sp.Parent().IsValid() {
				if p := findSpan(spans, func(p sdktrace.ReadOnlySpan) bool { return p.SpanContext().SpanID() == sp.Parent().SpanID() }); p != nil && p.Name() == asyncTopic+" process" {
					return true, ""
				}
			}
		}
		return false, describeSpans(spans)
	})

	server := findSpan(spans, isServer)
	if server == nil {
		t.Fatalf("no gRPC server span for Write; spans: %s", describeSpans(spans))
	}
	publish := childOf(t, spans, server, asyncTopic+" publish", trace.SpanKindProducer)
	if !hasAttr(publish, "messaging.system", "kafka") || !hasAttr(publish, "messaging.destination.name", asyncTopic) {
		t.Errorf("publish span attributes: %v", publish.Attributes())
	}
	process := childOf(t, spans, publish, asyncTopic+" process", trace.SpanKindConsumer)
	if !process.Parent().IsRemote() {
		t.Errorf("the process span's parent is not remote: the trace context did not come through Kafka")
	}
	var storage sdktrace.ReadOnlySpan
	for _, sp := range spans {
		if isWrite(sp) && sp.Parent().SpanID() == process.SpanContext().SpanID() {
			storage = sp
		}
	}
	if storage == nil {
		t.Fatalf("no storage write span under the process span; spans: %s", describeSpans(spans))
	}
	if storage.SpanContext().TraceID() != server.SpanContext().TraceID() || storage.SpanKind() != trace.SpanKindClient {
		t.Errorf("storage span %q: trace %s kind %v, want trace %s kind client", storage.Name(), storage.SpanContext().TraceID(), storage.SpanKind(), server.SpanContext().TraceID())
	}
	if system == "mongodb" && (!hasAttr(storage, "db.namespace", a.GetNamespace()) || !hasAttr(storage, "db.collection.name", "orders")) {
		t.Errorf("storage span attributes: %v", storage.Attributes())
	}

	// franz-go's kprom metrics, on the process's registry after producing.
	mfs, err := metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var produced float64
	for _, mf := range mfs {
		if mf.GetName() == "sink_kafka_produce_records_total" {
			for _, m := range mf.GetMetric() {
				produced += m.GetCounter().GetValue()
			}
		}
	}
	if produced < 1 {
		t.Errorf("sink_kafka_produce_records_total = %v after an async write, want at least 1", produced)
	}
}

// childOf returns the span named name whose parent is parent, in parent's trace.
func childOf(t *testing.T, spans []sdktrace.ReadOnlySpan, parent sdktrace.ReadOnlySpan, name string, kind trace.SpanKind) sdktrace.ReadOnlySpan {
	t.Helper()
	sp := findSpan(spans, func(sp sdktrace.ReadOnlySpan) bool { return sp.Name() == name })
	switch {
	case sp == nil:
		t.Fatalf("no span %q; spans: %s", name, describeSpans(spans))
	case sp.SpanKind() != kind:
		t.Fatalf("span %q has kind %v, want %v", name, sp.SpanKind(), kind)
	case sp.SpanContext().TraceID() != parent.SpanContext().TraceID():
		t.Fatalf("span %q is in trace %s, want %s (of %q)", name, sp.SpanContext().TraceID(), parent.SpanContext().TraceID(), parent.Name())
	case sp.Parent().SpanID() != parent.SpanContext().SpanID():
		t.Fatalf("span %q has parent %s, want %s (%q)", name, sp.Parent().SpanID(), parent.SpanContext().SpanID(), parent.Name())
	}
	return sp
}

func findSpan(spans []sdktrace.ReadOnlySpan, ok func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	for _, sp := range spans {
		if ok(sp) {
			return sp
		}
	}
	return nil
}

func hasAttr(sp sdktrace.ReadOnlySpan, key, value string) bool {
	for _, kv := range sp.Attributes() {
		if kv.Key == attribute.Key(key) {
			return kv.Value.String() == value
		}
	}
	return false
}

func describeSpans(spans []sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	for _, sp := range spans {
		fmt.Fprintf(&b, "[%q %v trace=%s span=%s parent=%s] ", sp.Name(), sp.SpanKind(), sp.SpanContext().TraceID(), sp.SpanContext().SpanID(), sp.Parent().SpanID())
	}
	return b.String()
}
