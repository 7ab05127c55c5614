package kafka

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
)

// stockPublisher is the stock watermill-kafka Publisher configured as
// NewMutationMessage documents.
func stockPublisher(t *testing.T, brokers []string) *wmkafka.Publisher {
	t.Helper()
	sc := wmkafka.DefaultSaramaSyncPublisherConfig()
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Partitioner = sarama.NewMurmur2Partitioner
	pub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{
		Brokers:               brokers,
		Marshaler:             wmkafka.NewWithPartitioningMarshaler(PartitionKey),
		OverwriteSaramaConfig: sc,
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return pub
}

// A service using the stock watermill-kafka Publisher queues mutations on
// Sink's log with NewMutationMessage and PartitionKey: every record lands
// in the same partition as with Sink's own publisher, and Sink's worker
// applies them in publish order.
func TestInteropStockPublisherToSinkWorker(t *testing.T) {
	brokers := kafkatest.InProcess(t, kafkatest.Topics("muts", "muts.dlq", "sink-side"), kafkatest.Partitions(4))
	var muts []domain.Mutation
	for i := range 60 {
		muts = append(muts, testMutation(fmt.Sprintf("m%02d", i), fmt.Sprintf("key-%d", i%12)))
	}
	stock := stockPublisher(t, brokers)
	for _, m := range muts {
		msg, err := NewMutationMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := stock.Publish("muts", msg); err != nil {
			t.Fatal(err)
		}
	}
	// The same mutations through Sink's queue, to another topic with as
	// many partitions.
	q, err := NewQueue(NewPublisher(newTestClient(t, brokers, ClientConfig{})), QueueConfig{Topic: "sink-side"})
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range q.Submit(context.Background(), muts) {
		if err != nil {
			t.Fatalf("mutation %d: %v", i, err)
		}
	}
	partOf := func(recs []*kgo.Record) map[string]int32 {
		out := map[string]int32{}
		for _, r := range recs {
			out[string(r.Key)] = r.Partition
		}
		return out
	}
	stockParts, sinkParts := partOf(readAll(t, brokers, "muts", len(muts))), partOf(readAll(t, brokers, "sink-side", len(muts)))
	spread := map[int32]bool{}
	for k, p := range sinkParts {
		spread[p] = true
		if stockParts[k] != p {
			t.Errorf("key %q: stock publisher wrote partition %d, Sink's publisher %d", k, stockParts[k], p)
		}
	}
	if len(spread) < 2 {
		t.Fatalf("12 keys all in one partition: the comparison proves nothing")
	}

	env := consumerEnv{brokers: brokers, queue: q}
	h := &fakeHandler{}
	w, _ := env.start(t, h, 16)
	waitFor(t, 20*time.Second, "every stock-published mutation applied", func() bool { return len(h.appliedIDs()) >= len(muts) })
	if st := w.Stats(); st.DeadLettered != 0 {
		t.Fatalf("stock-published mutations were dead-lettered: %+v", st)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	last := map[string]string{}
	for _, m := range h.applied {
		k := m.Address.Key.StringValue()
		if last[k] > m.ID {
			t.Errorf("record %s: %s applied after %s", k, m.ID, last[k])
		}
		last[k] = m.ID
		if m.Merge.Profile != "merge-patch" || !strings.Contains(string(m.Merge.Intent.Data), m.ID) {
			t.Errorf("mutation %s decoded as %+v", m.ID, m)
		}
	}
}

// The stock watermill-kafka Subscriber reads Sink's log: the message UUID
// is the mutation id and the payload decodes to the queued mutation.
func TestInteropSinkLogToStockSubscriber(t *testing.T) {
	brokers := kafkatest.InProcess(t, kafkatest.Topics("muts"), kafkatest.Partitions(3))
	q, err := NewQueue(NewPublisher(newTestClient(t, brokers, ClientConfig{})), QueueConfig{Topic: "muts"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]domain.Mutation{}
	var muts []domain.Mutation
	for i := range 20 {
		m := testMutation(fmt.Sprintf("s%02d", i), fmt.Sprintf("k%d", i%5))
		muts = append(muts, m)
		want[m.ID] = m
	}
	for i, err := range q.Submit(context.Background(), muts) {
		if err != nil {
			t.Fatalf("mutation %d: %v", i, err)
		}
	}

	sc := wmkafka.DefaultSaramaSubscriberConfig()
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
		Brokers:               brokers,
		Unmarshaler:           wmkafka.DefaultMarshaler{},
		OverwriteSaramaConfig: sc,
		ConsumerGroup:         "stock-readers",
	}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch, err := sub.Subscribe(ctx, "muts")
	if err != nil {
		t.Fatal(err)
	}
	lastOffset := map[int32]int64{}
	for len(want) > 0 {
		var msg *message.Message
		select {
		case msg = <-ch:
		case <-ctx.Done():
			t.Fatalf("%d mutations not read by the stock subscriber", len(want))
		}
		m, err := DecodeMutation(msg.Payload)
		if err != nil {
			t.Fatalf("message %s: %v", msg.UUID, err)
		}
		exp, ok := want[msg.UUID]
		if !ok || m.ID != msg.UUID || m.Address != exp.Address || string(m.Merge.Intent.Data) != string(exp.Merge.Intent.Data) {
			t.Fatalf("message %s decodes to %+v, want %+v", msg.UUID, m, exp)
		}
		if _, ok := msg.Metadata[KeyMetadata]; ok {
			t.Errorf("message %s: Sink wrote the key as a header too", msg.UUID)
		}
		p, _ := wmkafka.MessagePartitionFromCtx(msg.Context())
		o, _ := wmkafka.MessagePartitionOffsetFromCtx(msg.Context())
		if prev, seen := lastOffset[p]; seen && o <= prev {
			t.Errorf("partition %d: offset %d after %d", p, o, prev)
		}
		lastOffset[p] = o
		delete(want, msg.UUID)
		msg.Ack()
	}
}
