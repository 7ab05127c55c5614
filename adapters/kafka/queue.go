package kafka

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/trace"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

var _ ports.MutationQueue = (*Queue)(nil)

// QueueConfig configures a Queue.
type QueueConfig struct {
	// Topic of the mutation log.
	Topic string
	// PublishTimeout bounds one Submit call on top of the caller's context,
	// so that a broker outage turns into retryable errors instead of a hang
	// (default DefaultPublishTimeout).
	PublishTimeout time.Duration
	// TracerProvider makes a producer span per Submit and carries its
	// trace context in the messages' metadata (nil: no tracing; see
	// tracing.go).
	TracerProvider trace.TracerProvider
}

// Queue is the Kafka mutation log: ports.MutationQueue on a Watermill
// publisher. Each mutation becomes one message whose payload is
// EncodeMutation(m), whose UUID is the mutation id and whose Kafka key is
// domain.EncodeAddress(m.Address). One Submit is one Publish call, so with
// this package's Publisher a whole request is sent together.
type Queue struct {
	pub     message.Publisher
	topic   string
	timeout time.Duration
	tracer  trace.Tracer // nil: no tracing
}

// NewQueue returns a queue publishing to cfg.Topic through pub. With a
// *Publisher, failures are reported per mutation; with another publisher
// any error fails the whole Submit.
func NewQueue(pub message.Publisher, cfg QueueConfig) (*Queue, error) {
	if pub == nil {
		return nil, errors.New("cannot create the mutation queue: no publisher")
	}
	if cfg.Topic == "" {
		return nil, errors.New("cannot create the mutation queue: no topic")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cannot create the mutation queue: %w", err)
	}
	return &Queue{pub: pub, topic: cfg.Topic, timeout: cfg.PublishTimeout, tracer: tracerOf(cfg.TracerProvider)}, nil
}

// Topic returns the mutation log topic.
func (q *Queue) Topic() string { return q.topic }

// NewMutationMessage returns the Watermill message of one mutation: the
// message UUID is the mutation id, the payload EncodeMutation(m) and
// metadata[KeyMetadata] the Kafka key domain.EncodeAddress(m.Address).
//
// Another service can queue mutations for Sink with the stock
// watermill-kafka Publisher: publish these messages to Sink's topic with
// the marshaler NewWithPartitioningMarshaler(PartitionKey) and the Sarama
// partitioner NewMurmur2Partitioner (the Java client's, which Sink's own
// publisher uses too), so that every mutation of one record lands in the
// same partition as Sink's, in publish order. (That marshaler also writes
// KeyMetadata as a header; Sink ignores it in favour of the record key.)
func NewMutationMessage(m domain.Mutation) (*message.Message, error) {
	value, err := EncodeMutation(m)
	if err != nil {
		return nil, err
	}
	msg := message.NewMessage(m.ID, value)
	msg.Metadata.Set(KeyMetadata, string(domain.EncodeAddress(m.Address)))
	return msg, nil
}

// PartitionKey returns the Kafka key of a message built by
// NewMutationMessage (metadata[KeyMetadata]); its signature is
// watermill-kafka's GeneratePartitionKey.
func PartitionKey(_ string, msg *message.Message) (string, error) {
	k := msg.Metadata.Get(KeyMetadata)
	if k == "" {
		return "", fmt.Errorf("cannot partition message %s: no %s metadata (build it with NewMutationMessage)", msg.UUID, KeyMetadata)
	}
	return k, nil
}

// Submit implements ports.MutationQueue. A mutation is accepted (nil error)
// only once the broker acknowledged it durably; the others get a retryable
// CodeUnavailable error.
func (q *Queue) Submit(ctx context.Context, mutations []domain.Mutation) []error {
	errs := make([]error, len(mutations))
	if len(mutations) == 0 {
		return errs
	}
	ctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	ctx, span := q.startPublish(ctx, len(mutations))
	defer func() { endPublish(span, errs) }()
	msgs := make([]*message.Message, 0, len(mutations))
	owners := make([]int, 0, len(mutations))
	for i, m := range mutations {
		msg, err := NewMutationMessage(m)
		if err != nil {
			errs[i] = domain.Wrap(domain.CodeInternal, err, "cannot queue the mutation")
			continue
		}
		msg.SetContext(ctx)
		if span != nil {
			InjectTraceContext(ctx, msg.Metadata)
		}
		msgs = append(msgs, msg)
		owners = append(owners, i)
	}
	if len(msgs) == 0 {
		return errs
	}
	err := q.pub.Publish(q.topic, msgs...)
	if err == nil {
		return errs
	}
	var pe *PublishError
	if errors.As(err, &pe) {
		for _, f := range pe.Failed {
			if f.Index >= 0 && f.Index < len(owners) {
				errs[owners[f.Index]] = q.unavailable(f.Err)
			}
		}
		return errs
	}
	for _, i := range owners {
		errs[i] = q.unavailable(err)
	}
	return errs
}

func (q *Queue) unavailable(err error) *domain.Error {
	msg := fmt.Sprintf("the mutation queue did not accept the mutation (topic %q): %v", q.topic, err)
	if errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		msg += "; it may still be queued and applied, so retry only if applying it twice is acceptable"
	}
	return &domain.Error{Code: domain.CodeUnavailable, Retryable: true, Message: msg, Cause: err}
}
