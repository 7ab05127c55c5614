// Package kafka is Sink's Kafka adapter: the durable mutation log behind
// RETURN_AFTER_ACCEPTED (Queue, a ports.MutationQueue) and the worker's
// batch consumer (Consumer) that hands queued mutations to a
// ports.MutationHandler and dead-letters those that fail permanently.
//
// Messages follow Watermill's model (message.Message, message.Publisher):
// Publisher is a message.Publisher over a franz-go client that sends all
// messages of one Publish together and waits for every acknowledgement, and
// Marshal/Unmarshal convert messages to and from Kafka records. The batch
// consumer is this package's own: Watermill's Kafka subscriber keeps one
// message in flight per partition and has no batch mode.
//
// Encodings (documented in docs/async.md):
//   - record key: domain.EncodeAddress (version byte 0x01);
//   - record value: MutationEncodingV1 (0x01) followed by the protobuf
//     sink.queue.v1.Mutation;
//   - dead-letter records: the original key, value and headers plus the
//     sink-dlq-* headers (HeaderDLQVersion "1").
//
// It imports domain and ports only (plus Watermill and franz-go).
package kafka
