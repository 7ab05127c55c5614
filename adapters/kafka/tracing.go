package kafka

import (
	"context"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sink-io/sink/internal/spans"
)

// Tracing. The queue and the worker take a trace.TracerProvider
// (QueueConfig.TracerProvider, WorkerConfig.TracerProvider); nil or the
// no-op provider turns their tracing off, and then they do no tracing work
// per message.
//
//   - Queue.Submit makes a producer span "<topic> publish" around one
//     Publish and writes its context into every message's metadata with
//     the W3C TraceContext and Baggage propagators (the "traceparent",
//     "tracestate" and "baggage" entries), which Marshal turns into Kafka
//     headers and Unmarshal back into metadata.
//   - The worker makes one consumer span "<topic> process" per batch. Its
//     parent is the trace context of the batch's first message (in poll
//     order) that carries one; the distinct contexts of the batch's other
//     messages become links (at most maxProcessLinks). Storage calls made
//     while applying the batch are its children (the context flows).

// tracerName is the instrumentation scope of this package's spans.
const tracerName = "github.com/sink-io/sink/adapters/kafka"

// maxProcessLinks bounds the links of one batch's process span (the SDK's
// default span limit).
const maxProcessLinks = 128

// propagator reads and writes the trace context in message metadata.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// tracerOf returns the package's tracer from tp, or nil when tp records
// nothing (nil or the no-op provider).
func tracerOf(tp trace.TracerProvider) trace.Tracer { return spans.Tracer(tp, tracerName) }

// metadataCarrier is a propagation.TextMapCarrier over Watermill metadata.
type metadataCarrier message.Metadata

func (c metadataCarrier) Get(key string) string { return c[key] }
func (c metadataCarrier) Set(key, value string) { c[key] = value }
func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// InjectTraceContext writes the trace context of ctx into md (nothing when
// ctx carries no valid span context).
func InjectTraceContext(ctx context.Context, md message.Metadata) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, metadataCarrier(md))
}

// ExtractTraceContext returns ctx with the trace context (and baggage)
// carried in md, if any.
func ExtractTraceContext(ctx context.Context, md message.Metadata) context.Context {
	return propagator.Extract(ctx, metadataCarrier(md))
}

// messagingAttrs are the attributes common to the package's spans.
func messagingAttrs(topic, op string, n int) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.destination.name", topic),
		attribute.String("messaging.operation.type", op),
		attribute.Int("messaging.batch.message_count", n),
	}
}

// startPublish starts the producer span of one Submit; span is nil when
// tracing is off.
func (q *Queue) startPublish(ctx context.Context, n int) (context.Context, trace.Span) {
	if q.tracer == nil {
		return ctx, nil
	}
	return q.tracer.Start(ctx, q.topic+" publish", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(messagingAttrs(q.topic, "send", n)...))
}

// endPublish ends the producer span with the number of mutations the
// queue did not accept.
func endPublish(span trace.Span, errs []error) {
	if span == nil {
		return
	}
	failed := 0
	var first error
	for _, err := range errs {
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	if failed > 0 {
		span.SetAttributes(attribute.Int("sink.queue.failed_messages", failed))
		span.RecordError(first)
		span.SetStatus(codes.Error, strconv.Itoa(failed)+" of "+strconv.Itoa(len(errs))+" mutations not accepted")
	}
	span.End()
}

// startProcess starts the consumer span of one batch (see the package's
// tracing rule above); span is nil when tracing is off.
func (w *Worker) startProcess(ctx context.Context, entries []*batchEntry) (context.Context, trace.Span) {
	if w.tracer == nil {
		return ctx, nil
	}
	parent := ctx
	var parentSC trace.SpanContext
	var links []trace.Link
	type spanID struct {
		t trace.TraceID
		s trace.SpanID
	}
	seen := map[spanID]bool{}
	for _, e := range entries {
		if len(links) >= maxProcessLinks {
			break
		}
		if _, ok := e.msg.Metadata["traceparent"]; !ok {
			continue
		}
		mctx := ExtractTraceContext(ctx, e.msg.Metadata)
		sc := trace.SpanContextFromContext(mctx)
		id := spanID{sc.TraceID(), sc.SpanID()}
		if !sc.IsValid() || seen[id] {
			continue
		}
		seen[id] = true
		if !parentSC.IsValid() {
			parent, parentSC = mctx, sc
			continue
		}
		links = append(links, trace.Link{SpanContext: sc})
	}
	return w.tracer.Start(parent, w.cfg.Topic+" process", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(links...), trace.WithAttributes(messagingAttrs(w.cfg.Topic, "process", len(entries))...))
}

// endProcess ends a batch's span with the number of its messages that
// were nacked (read again) and dead-lettered.
func endProcess(span trace.Span, entries []*batchEntry, dead []*deadLetterInfo) {
	if span == nil {
		return
	}
	nacked, deadLettered := 0, 0
	var first error
	for i, e := range entries {
		if e.err != nil {
			nacked++
			if first == nil {
				first = e.err
			}
		} else if dead[i] != nil {
			deadLettered++
		}
	}
	span.SetAttributes(attribute.Int("sink.worker.nacked_messages", nacked), attribute.Int("sink.worker.dead_lettered_messages", deadLettered))
	if first != nil {
		span.RecordError(first)
		span.SetStatus(codes.Error, strconv.Itoa(nacked)+" of "+strconv.Itoa(len(entries))+" messages not finished")
	}
	span.End()
}
