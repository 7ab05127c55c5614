// Package kafka is Sink's Kafka adapter: the durable mutation log behind
// RETURN_AFTER_ACCEPTED (Queue, a ports.MutationQueue) and the worker
// (Worker), a Watermill message.Router that applies the log through a
// ports.MutationHandler and dead-letters what fails permanently.
//
// Messages follow Watermill's model: Publisher is a message.Publisher over a
// franz-go client that sends all messages of one Publish together and waits
// for every acknowledgement; Subscriber is a message.Subscriber over a
// franz-go consumer group member that keeps a whole poll in flight, tags
// each message with its partition, offset and position in the poll
// (Metadata*), and commits per partition only the prefix of acked messages;
// Marshal/Unmarshal convert messages to and from Kafka records.
//
// Batching through a Router whose handlers see one message at a time, each
// in its own goroutine: Worker.Handle collects the messages of one poll
// until all have arrived, orders them by their position in the poll (never
// by arrival, so goroutine scheduling cannot reorder a record's mutations),
// applies them in one ApplyMutations call (the application's wave executor:
// few storage calls, one record's mutations in offset order) and returns
// each message's own result (acked or nacked). A message without batch
// metadata (another Pub/Sub, such as Watermill's GoChannel) is a batch of
// one.
//
// Effectively once per record: every consumed mutation carries its log
// position (the topic's id or a configured epoch, partition, offset) in
// domain.SourcePosition; the application records it, with the mutation's
// id, in the record's applied mark, which skips redeliveries and refuses a
// stale worker's late writes. The worker bounds a batch in time
// (WorkerConfig.BatchTimeout, well below ClientConfig.RebalanceTimeout),
// parks a record whose mutation keeps failing transiently without holding
// the rest of its partition, bounds its dead-letter writes, and stops the
// work of partitions it lost (Fence); failed offset commits are retried
// and reported (Subscriber.Health, Worker.Health).
//
// Interoperability: NewMutationMessage and PartitionKey let the stock
// watermill-kafka Publisher queue mutations on Sink's log, and the stock
// watermill-kafka Subscriber reads Sink's log (UUID = mutation id).
//
// Encodings (documented in docs/async.md):
//   - record key: domain.EncodeAddress (version byte 0x01);
//   - record value: MutationEncodingV1 (0x01) followed by the protobuf
//     sink.queue.v1.Mutation;
//   - dead-letter records: the original key, value and headers plus the
//     sink-dlq-* headers (HeaderDLQVersion "1").
//
// Tracing (tracing.go): with a tracer provider, Queue.Submit makes a
// producer span and carries its W3C trace context in the messages'
// metadata (Kafka headers), and the worker's span per batch continues the
// trace of the batch's first traced message and links the others.
//
// It imports domain and ports only (plus Watermill, franz-go and the
// OpenTelemetry API).
package kafka
