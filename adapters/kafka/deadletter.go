package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/domain"
)

// Dead-letter record headers. A dead-letter record keeps the original key,
// value and headers of the mutation record and adds these (version 1).
const (
	// HeaderDLQVersion is the version of this header set: "1".
	HeaderDLQVersion = "sink-dlq-version"
	// HeaderDLQReason is ReasonUndecodable or ReasonApplyFailed.
	HeaderDLQReason = "sink-dlq-reason"
	// HeaderDLQErrorCode is the error class: a domain code name such as
	// INVALID_ARGUMENT, NOT_FOUND, REVISION_MISMATCH or UNAVAILABLE.
	HeaderDLQErrorCode = "sink-dlq-error-code"
	// HeaderDLQErrorMessage is the error message.
	HeaderDLQErrorMessage = "sink-dlq-error-message"
	// HeaderDLQAttempts is how many times the worker tried the mutation
	// (decimal; 0 for undecodable records).
	HeaderDLQAttempts = "sink-dlq-attempts"
	// HeaderDLQSourceTopic, HeaderDLQSourcePartition and
	// HeaderDLQSourceOffset locate the original record.
	HeaderDLQSourceTopic     = "sink-dlq-source-topic"
	HeaderDLQSourcePartition = "sink-dlq-source-partition"
	HeaderDLQSourceOffset    = "sink-dlq-source-offset"
	// HeaderDLQTime is when the worker gave up (RFC 3339, UTC).
	HeaderDLQTime = "sink-dlq-time"
	// HeaderDLQMutationID is the mutation id (empty when undecodable).
	HeaderDLQMutationID = "sink-dlq-mutation-id"

	// HeaderReplayedFrom is set on a mutation record re-submitted by Replay:
	// "<dead-letter topic>/<partition>/<offset>".
	HeaderReplayedFrom = "sink-replayed-from"
)

// Dead-letter reasons.
const (
	ReasonUndecodable = "undecodable"
	ReasonApplyFailed = "apply-failed"
)

// deadLetterInfo is why a record is dead-lettered.
type deadLetterInfo struct {
	reason     string
	code       domain.Code
	message    string
	attempts   int
	mutationID string
	// mut is the index of the failed mutation in the batch's decoded
	// mutations (-1: undecodable); uncertain, that its failure may hide a
	// write that took place (see uncertain).
	mut       int
	uncertain bool
	detail    string // the error's own message, for the log
	// overtaken: the batch wrote a later mutation of the same record from
	// the same partition over a mark that had not reached this one
	// (ports.ApplyOutcome.Overtaken): only this worker can dead-letter it.
	overtaken bool
}

// newDeadLetterMessage returns the dead-letter message of msg, read from
// topic at src: its key, payload and metadata (without the subscriber's
// Metadata* entries and earlier sink-dlq-* headers) plus the sink-dlq-*
// headers.
func newDeadLetterMessage(msg *message.Message, topic string, src source, info deadLetterInfo, now time.Time) *message.Message {
	dl := message.NewMessage(msg.UUID, msg.Payload)
	for k, v := range msg.Metadata {
		switch {
		case strings.HasPrefix(k, "sink-dlq-"), isSubscriberMetadata(k):
		default:
			dl.Metadata[k] = v
		}
	}
	md := dl.Metadata
	md.Set(HeaderDLQVersion, "1")
	md.Set(HeaderDLQReason, info.reason)
	md.Set(HeaderDLQErrorCode, info.code.String())
	md.Set(HeaderDLQErrorMessage, validUTF8(info.message))
	md.Set(HeaderDLQAttempts, strconv.Itoa(info.attempts))
	md.Set(HeaderDLQSourceTopic, topic)
	md.Set(HeaderDLQSourcePartition, strconv.FormatInt(int64(src.partition), 10))
	md.Set(HeaderDLQSourceOffset, strconv.FormatInt(src.offset, 10))
	md.Set(HeaderDLQTime, now.UTC().Format(time.RFC3339Nano))
	md.Set(HeaderDLQMutationID, info.mutationID)
	return dl
}

// validUTF8 replaces invalid UTF-8 sequences (ids and messages may come
// from foreign records).
func validUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// DeadLetter is one record of the dead-letter topic.
type DeadLetter struct {
	// Partition and Offset locate the record in the dead-letter topic.
	Partition int32
	Offset    int64
	// Key, Value and Headers are the record as stored (the original
	// mutation record's key and value).
	Key     []byte
	Value   []byte
	Headers []kgo.RecordHeader

	Reason          string
	ErrorCode       string
	ErrorMessage    string
	Attempts        int
	SourceTopic     string
	SourcePartition int32
	SourceOffset    int64
	DeadLetteredAt  time.Time
	MutationID      string

	// Mutation is the decoded mutation; nil when the value is undecodable
	// (DecodeError says why).
	Mutation    *domain.Mutation
	DecodeError string
}

// ParseDeadLetter interprets a dead-letter record.
func ParseDeadLetter(r *kgo.Record) DeadLetter {
	d := DeadLetter{Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Headers: r.Headers}
	for _, h := range r.Headers {
		v := string(h.Value)
		switch h.Key {
		case HeaderDLQReason:
			d.Reason = v
		case HeaderDLQErrorCode:
			d.ErrorCode = v
		case HeaderDLQErrorMessage:
			d.ErrorMessage = v
		case HeaderDLQAttempts:
			d.Attempts, _ = strconv.Atoi(v)
		case HeaderDLQSourceTopic:
			d.SourceTopic = v
		case HeaderDLQSourcePartition:
			p, _ := strconv.ParseInt(v, 10, 32)
			d.SourcePartition = int32(p)
		case HeaderDLQSourceOffset:
			d.SourceOffset, _ = strconv.ParseInt(v, 10, 64)
		case HeaderDLQTime:
			d.DeadLetteredAt, _ = time.Parse(time.RFC3339Nano, v)
		case HeaderDLQMutationID:
			d.MutationID = v
		}
	}
	m, err := decodeRecord(r.Key, r.Value)
	if err != nil {
		d.DecodeError = err.Error()
	} else {
		d.Mutation = &m
		if d.MutationID == "" {
			d.MutationID = m.ID
		}
	}
	return d
}

// decodeRecord decodes a mutation record and checks that its key is the
// encoding of the mutation's address (otherwise per-record ordering would
// not hold).
func decodeRecord(key, value []byte) (domain.Mutation, error) {
	m, err := DecodeMutation(value)
	if err != nil {
		return m, err
	}
	if want := domain.EncodeAddress(m.Address); string(key) != string(want) {
		return domain.Mutation{}, fmt.Errorf("%w: mutation %s: the record key is not the encoding of the mutation's address %s", ErrMalformedMutation, m.ID, m.Address)
	}
	return m, nil
}

// ReadDeadLetters reads every record of the dead-letter topic that exists
// when it starts, in partition then offset order, with a short-lived client
// of its own (no consumer group, nothing committed); opts are added to its
// options (TLS, SASL). A topic that does not exist has no dead letters.
func ReadDeadLetters(ctx context.Context, brokers []string, topic string, opts ...kgo.Opt) ([]DeadLetter, error) {
	base := append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID("sink-dead-letter")}, opts...)
	admin, err := kgo.NewClient(base...)
	if err != nil {
		return nil, fmt.Errorf("cannot create the Kafka client: %w", err)
	}
	defer admin.Close()
	bounds, err := partitionBounds(ctx, admin, topic)
	if err != nil {
		return nil, err
	}
	remaining := map[int32]int64{} // partition → last offset still to read
	start := map[int32]kgo.Offset{}
	for p, b := range bounds {
		if b[1] > b[0] {
			remaining[p] = b[1] - 1
			start[p] = kgo.NewOffset().At(b[0])
		}
	}
	if len(remaining) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(append(base, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}))...)
	if err != nil {
		return nil, fmt.Errorf("cannot create the Kafka client: %w", err)
	}
	defer cl.Close()
	var out []DeadLetter
	for len(remaining) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("cannot read dead-letter topic %q: %w", topic, err)
		}
		var ferr error
		fetches.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("cannot read dead-letter topic %q partition %d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		fetches.EachRecord(func(r *kgo.Record) {
			last, ok := remaining[r.Partition]
			if !ok || r.Offset > last {
				return
			}
			out = append(out, ParseDeadLetter(r))
			if r.Offset == last {
				delete(remaining, r.Partition)
			}
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out, nil
}

// partitionBounds returns [log start, end) offsets of every partition of
// topic (kadm: metadata, then ListOffsets for the earliest and the latest
// offset). A topic that does not exist has no partitions.
func partitionBounds(ctx context.Context, cl *kgo.Client, topic string) (map[int32][2]int64, error) {
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return map[int32][2]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot list the start offsets of topic %q: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("cannot list the end offsets of topic %q: %w", topic, err)
	}
	out := make(map[int32][2]int64, len(starts[topic]))
	for p, o := range starts[topic] {
		e, ok := ends.Lookup(topic, p)
		if !ok {
			return nil, fmt.Errorf("cannot list the end offset of topic %q partition %d", topic, p)
		}
		out[p] = [2]int64{o.Offset, e.Offset}
	}
	return out, nil
}

// ReplayMessage returns the message that re-submits a dead letter to the
// mutation log: the original key, value and headers (without the
// dead-letter headers) plus HeaderReplayedFrom.
func ReplayMessage(deadLetterTopic string, d DeadLetter) *message.Message {
	r := &kgo.Record{Topic: deadLetterTopic, Key: d.Key, Value: d.Value, Partition: d.Partition, Offset: d.Offset}
	for _, h := range d.Headers {
		if strings.HasPrefix(h.Key, "sink-dlq-") || h.Key == HeaderReplayedFrom {
			continue
		}
		r.Headers = append(r.Headers, h)
	}
	msg := Unmarshal(r)
	msg.SetContext(context.Background())
	msg.Metadata.Set(HeaderReplayedFrom, fmt.Sprintf("%s/%d/%d", deadLetterTopic, d.Partition, d.Offset))
	return msg
}

// Replay re-submits dead letters to the mutation log topic through pub, in
// the given order, and waits for the acknowledgements. The mutation ids are
// kept. With a *Publisher the error is a *PublishError listing the letters
// that were not re-submitted.
func Replay(ctx context.Context, pub message.Publisher, deadLetterTopic, topic string, letters []DeadLetter) error {
	if len(letters) == 0 {
		return nil
	}
	msgs := make([]*message.Message, len(letters))
	for i, d := range letters {
		msgs[i] = ReplayMessage(deadLetterTopic, d)
		msgs[i].SetContext(ctx)
	}
	if err := pub.Publish(topic, msgs...); err != nil {
		return fmt.Errorf("cannot replay dead letters to topic %q: %w", topic, err)
	}
	return nil
}
