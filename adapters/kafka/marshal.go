package kafka

import (
	"context"
	"sort"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Watermill message conventions of this package.
const (
	// UUIDHeader carries the Watermill message UUID (the same header name as
	// watermill-kafka's default marshaler, so both interoperate).
	UUIDHeader = "_watermill_message_uuid"
	// KeyMetadata is the metadata entry that becomes the Kafka record key
	// (and not a header) when a message is marshaled, and that holds the
	// record key after unmarshaling. Keys are binary: Go strings hold bytes.
	KeyMetadata = "_sink_kafka_key"
)

// Marshal converts a Watermill message to a Kafka record: payload → value,
// metadata[KeyMetadata] → key, a non-empty UUID → UUIDHeader, every other metadata
// entry → a header (sorted by name, so the output is deterministic).
func Marshal(topic string, msg *message.Message) *kgo.Record {
	r := &kgo.Record{Topic: topic, Value: msg.Payload}
	if k, ok := msg.Metadata[KeyMetadata]; ok {
		r.Key = []byte(k)
	}
	r.Headers = make([]kgo.RecordHeader, 0, len(msg.Metadata)+1)
	if msg.UUID != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: UUIDHeader, Value: []byte(msg.UUID)})
	}
	names := make([]string, 0, len(msg.Metadata))
	for k := range msg.Metadata {
		if k != KeyMetadata && k != UUIDHeader {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(msg.Metadata[k])})
	}
	return r
}

type recordCtxKey struct{}

// Unmarshal converts a consumed Kafka record to a Watermill message: the
// UUIDHeader becomes the UUID, the key goes to metadata[KeyMetadata], every
// other header to metadata, and the record itself is kept in the message
// context (see RecordOf).
func Unmarshal(r *kgo.Record) *message.Message { return unmarshal(r, 0) }

// unmarshal is Unmarshal with room for extra more metadata entries.
func unmarshal(r *kgo.Record, extra int) *message.Message {
	var uuid string
	md := make(message.Metadata, len(r.Headers)+1+extra)
	for _, h := range r.Headers {
		if h.Key == UUIDHeader {
			uuid = string(h.Value)
			continue
		}
		md[h.Key] = string(h.Value)
	}
	if r.Key != nil {
		md[KeyMetadata] = string(r.Key)
	}
	msg := message.NewMessage(uuid, r.Value)
	msg.Metadata = md
	msg.SetContext(context.WithValue(context.Background(), recordCtxKey{}, r))
	return msg
}

// RecordOf returns the Kafka record a message was unmarshaled from.
func RecordOf(msg *message.Message) (*kgo.Record, bool) {
	r, ok := msg.Context().Value(recordCtxKey{}).(*kgo.Record)
	return r, ok
}
