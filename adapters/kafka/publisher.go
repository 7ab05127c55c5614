package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"
)

var _ message.Publisher = (*Publisher)(nil)

// ErrOutcomeUnknown is wrapped by the error of a message whose context
// ended while it was buffered or in flight: the broker may still write it.
var ErrOutcomeUnknown = errors.New("no acknowledgement before the deadline: the message may or may not be written")

// ErrPublisherClosed is returned by Publish after Close.
var ErrPublisherClosed = errors.New("publisher is closed")

// Publisher is a Watermill message.Publisher over a franz-go client that
// sends all messages of one Publish call together: it hands every record to
// the client at once (the client batches them per partition into few
// produce requests) and then waits for all acknowledgements. The client
// decides durability: NewClient requires acknowledgement by all in-sync
// replicas (acks=all) with the idempotent producer.
//
// Each message is produced with its own context (message.Context()): when
// it ends before the broker acknowledged, Publish stops waiting for that
// message and reports it failed with ErrOutcomeUnknown. Publish returns nil
// when every message was acknowledged, otherwise a *PublishError that lists
// the failed messages (the others were acknowledged).
//
// Records are produced in argument order, and records of one key go to one
// partition (the client's default partitioner hashes keys like the Java
// client), so their order is kept.
type Publisher struct {
	client *kgo.Client
	closed atomic.Bool
}

// NewPublisher returns a publisher over client. Close does not close the
// client: its owner does.
func NewPublisher(client *kgo.Client) *Publisher { return &Publisher{client: client} }

// FailedMessage is one message that Publish could not get acknowledged.
type FailedMessage struct {
	// Index is the position of the message among Publish's arguments.
	Index int
	UUID  string
	Err   error
}

// PublishError reports the messages of one Publish call that failed. The
// messages not listed were acknowledged.
type PublishError struct {
	Topic  string
	Total  int
	Failed []FailedMessage
}

func (e *PublishError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cannot publish %d of %d messages to topic %q", len(e.Failed), e.Total, e.Topic)
	if len(e.Failed) > 0 {
		fmt.Fprintf(&b, ": message %s: %v", e.Failed[0].UUID, e.Failed[0].Err)
		if len(e.Failed) > 1 {
			fmt.Fprintf(&b, " (and %d more)", len(e.Failed)-1)
		}
	}
	return b.String()
}

// Unwrap returns the per-message errors.
func (e *PublishError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f.Err
	}
	return errs
}

// Publish implements message.Publisher (see Publisher).
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return ErrPublisherClosed
	}
	if len(msgs) == 0 {
		return nil
	}
	errs := make([]error, len(msgs))
	done := make([]chan struct{}, len(msgs))
	for i, msg := range msgs {
		ch := make(chan struct{})
		done[i] = ch
		errp := &errs[i]
		p.client.Produce(msg.Context(), Marshal(topic, msg), func(_ *kgo.Record, err error) {
			*errp = err
			close(ch)
		})
	}
	var failed []FailedMessage
	for i, msg := range msgs {
		ctx := msg.Context()
		var err error
		select {
		case <-done[i]:
			err = errs[i]
		case <-ctx.Done():
			select {
			case <-done[i]:
				err = errs[i]
			default:
				err = fmt.Errorf("%w: %w", ErrOutcomeUnknown, context.Cause(ctx))
			}
		}
		if err != nil {
			failed = append(failed, FailedMessage{Index: i, UUID: msg.UUID, Err: err})
		}
	}
	if len(failed) > 0 {
		return &PublishError{Topic: topic, Total: len(msgs), Failed: failed}
	}
	return nil
}

// Close implements message.Publisher. Later Publish calls fail; messages
// already handed to the client are still delivered while the client lives.
func (p *Publisher) Close() error {
	p.closed.Store(true)
	return nil
}
