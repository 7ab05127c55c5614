package kafka

import (
	"context"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

func newRecordingProvider(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

func spanNamed(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Name() == name {
			if found != nil {
				t.Fatalf("two spans named %q", name)
			}
			found = sp
		}
	}
	if found == nil {
		t.Fatalf("no span named %q", name)
	}
	return found
}

// The queue's publish span is the caller's child, and its context reaches
// the consumed message's metadata through the Kafka headers.
func TestQueueCarriesTheTraceContext(t *testing.T) {
	tp, rec := newRecordingProvider(t)
	pub := &stubPublisher{err: func([]*message.Message) error { return nil }}
	q, err := NewQueue(pub, QueueConfig{Topic: "muts", TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "rpc")
	if errs := q.Submit(ctx, []domain.Mutation{testMutation("m1", "a"), testMutation("m2", "b")}); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	parent.End()
	publish := spanNamed(t, rec, "muts publish")
	if publish.Parent().SpanID() != parent.SpanContext().SpanID() || publish.SpanKind() != trace.SpanKindProducer {
		t.Fatalf("publish span: parent %s kind %v, want parent %s, producer", publish.Parent().SpanID(), publish.SpanKind(), parent.SpanContext().SpanID())
	}
	for _, msg := range pub.msgs {
		// Kafka headers and back, as the worker receives it.
		got := Unmarshal(Marshal("muts", msg))
		sc := trace.SpanContextFromContext(ExtractTraceContext(context.Background(), got.Metadata))
		if sc.TraceID() != publish.SpanContext().TraceID() || sc.SpanID() != publish.SpanContext().SpanID() {
			t.Fatalf("message %s carries span %s/%s, want the publish span %s/%s", msg.UUID, sc.TraceID(), sc.SpanID(),
				publish.SpanContext().TraceID(), publish.SpanContext().SpanID())
		}
	}
}

func TestQueueWithoutTracingAddsNoMetadata(t *testing.T) {
	pub := &stubPublisher{err: func([]*message.Message) error { return nil }}
	q, err := NewQueue(pub, QueueConfig{Topic: "muts", TracerProvider: noop.NewTracerProvider()})
	if err != nil {
		t.Fatal(err)
	}
	// Even with a span in the context (another component's tracing).
	tp, _ := newRecordingProvider(t)
	ctx, span := tp.Tracer("test").Start(context.Background(), "rpc")
	defer span.End()
	q.Submit(ctx, []domain.Mutation{testMutation("m1", "a")})
	if len(pub.msgs) != 1 || len(pub.msgs[0].Metadata) != 1 {
		t.Fatalf("metadata %v, want only the key", pub.msgs[0].Metadata)
	}
}

// spanHandler records the span context its ApplyMutations gets.
type spanHandler struct {
	mu  sync.Mutex
	scs []trace.SpanContext
}

func (h *spanHandler) ApplyMutations(ctx context.Context, muts []domain.Mutation) []ports.ApplyOutcome {
	h.mu.Lock()
	h.scs = append(h.scs, trace.SpanContextFromContext(ctx))
	h.mu.Unlock()
	out := make([]ports.ApplyOutcome, len(muts))
	for i := range out {
		out[i] = ports.ApplyOutcome{Attempts: 1}
	}
	return out
}

// A batch's process span continues the trace of its first message that
// carries one, links the others, and is the context of applying.
func TestWorkerProcessSpanContinuesTheFirstTrace(t *testing.T) {
	tp, rec := newRecordingProvider(t)
	pub := &stubPublisher{err: func([]*message.Message) error { return nil }}
	q, err := NewQueue(pub, QueueConfig{Topic: "muts", TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*message.Message
	var parents []trace.SpanContext
	for i, id := range []string{"m1", "m2"} {
		ctx, span := tp.Tracer("test").Start(context.Background(), "rpc")
		q.Submit(ctx, []domain.Mutation{testMutation(id, string(rune('a'+i)))})
		span.End()
		msgs = append(msgs, pub.msgs...)
		parents = append(parents, trace.SpanContextFromContext(ExtractTraceContext(context.Background(), pub.msgs[0].Metadata)))
	}
	// A message without a trace context first: it neither parents nor links.
	untraced, err := NewMutationMessage(testMutation("m0", "z"))
	if err != nil {
		t.Fatal(err)
	}
	msgs = append([]*message.Message{untraced}, msgs...)

	h := &spanHandler{}
	gc := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	w, err := NewWorker(gc, pub, h, WorkerConfig{Topic: "muts", DeadLetterTopic: "dlq", Logger: quietLogger(), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	entries := make([]*batchEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = &batchEntry{msg: Unmarshal(Marshal("muts", m))}
	}
	w.apply(entries, nil)
	for i, e := range entries {
		if e.err != nil {
			t.Fatalf("entry %d: %v", i, e.err)
		}
	}

	process := spanNamed(t, rec, "muts process")
	if process.SpanKind() != trace.SpanKindConsumer {
		t.Fatalf("process span kind %v", process.SpanKind())
	}
	if process.Parent().TraceID() != parents[0].TraceID() || process.Parent().SpanID() != parents[0].SpanID() || !process.Parent().IsRemote() {
		t.Fatalf("process span parent %s/%s, want the first message's publish span %s/%s", process.Parent().TraceID(), process.Parent().SpanID(), parents[0].TraceID(), parents[0].SpanID())
	}
	links := process.Links()
	if len(links) != 1 || links[0].SpanContext.SpanID() != parents[1].SpanID() || links[0].SpanContext.TraceID() != parents[1].TraceID() {
		t.Fatalf("process span links %v, want the second message's publish span %s", links, parents[1].SpanID())
	}
	if len(h.scs) != 1 || h.scs[0].SpanID() != process.SpanContext().SpanID() {
		t.Fatalf("the handler ran in span %v, want the process span %s", h.scs, process.SpanContext().SpanID())
	}
}
