package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/internal/testkit/kafkatest"
)

func newTestClient(t *testing.T, brokers []string, cfg ClientConfig) *kgo.Client {
	t.Helper()
	cfg.Brokers = brokers
	if cfg.PublishTimeout == 0 {
		cfg.PublishTimeout = 5 * time.Second
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 6 * time.Second
	}
	cl, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// readAll reads every record of topic up to now with a fresh direct consumer.
func readAll(t *testing.T, brokers []string, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s before the deadline", len(out), want, topic)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func TestPublisherSendsBatchAndKeepsKeyOrder(t *testing.T) {
	brokers := kafkatest.InProcess(t, kafkatest.Topics("t"), kafkatest.Partitions(4))
	pub := NewPublisher(newTestClient(t, brokers, ClientConfig{}))
	const n = 500
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(fmt.Sprintf("m%03d", i), []byte(fmt.Sprint(i)))
		msgs[i].Metadata.Set(KeyMetadata, fmt.Sprintf("key-%d", i%7))
		msgs[i].Metadata.Set("h", "v")
	}
	if err := pub.Publish("t", msgs...); err != nil {
		t.Fatal(err)
	}
	recs := readAll(t, brokers, "t", n)
	partitionOf := map[string]int32{}
	lastOf := map[string]int{}
	for _, r := range recs {
		m := Unmarshal(r)
		k := m.Metadata[KeyMetadata]
		if p, ok := partitionOf[k]; ok && p != r.Partition {
			t.Fatalf("key %s in partitions %d and %d", k, p, r.Partition)
		}
		partitionOf[k] = r.Partition
		var i int
		fmt.Sscan(string(m.Payload), &i)
		if last, ok := lastOf[k]; ok && i < last {
			t.Fatalf("key %s: message %d after %d", k, i, last)
		}
		lastOf[k] = i
		if m.UUID != fmt.Sprintf("m%03d", i) || m.Metadata["h"] != "v" {
			t.Fatalf("message %d: uuid %q metadata %v", i, m.UUID, m.Metadata)
		}
		if got, ok := RecordOf(m); !ok || got != r {
			t.Fatal("RecordOf does not return the record")
		}
	}
}

func TestPublisherReportsPerMessageErrors(t *testing.T) {
	brokers := kafkatest.InProcess(t, kafkatest.Topics("t"))
	pub := NewPublisher(newTestClient(t, brokers, ClientConfig{MaxRecordBytes: 1000}))
	msgs := []*message.Message{
		message.NewMessage("ok-1", []byte("a")),
		message.NewMessage("too-big", make([]byte, 4<<20)),
		message.NewMessage("ok-2", []byte("b")),
	}
	err := pub.Publish("t", msgs...)
	var pe *PublishError
	if !errors.As(err, &pe) {
		t.Fatalf("got %v, want a *PublishError", err)
	}
	if len(pe.Failed) != 1 || pe.Failed[0].Index != 1 || pe.Failed[0].UUID != "too-big" {
		t.Fatalf("failed = %+v, want only index 1", pe.Failed)
	}
	if !errors.Is(err, kerr.MessageTooLarge) {
		t.Errorf("error %v does not wrap MessageTooLarge", err)
	}
	recs := readAll(t, brokers, "t", 2)
	if len(recs) != 2 || string(recs[0].Value) != "a" || string(recs[1].Value) != "b" {
		t.Fatalf("topic holds %d records", len(recs))
	}
}

func TestPublisherFailsWithinDeadlineWhenBrokerIsGone(t *testing.T) {
	c := kafkatest.InProcessCluster(t, kafkatest.Topics("t"))
	brokers := c.ListenAddrs()
	pub := NewPublisher(newTestClient(t, brokers, ClientConfig{PublishTimeout: time.Second}))
	if err := pub.Publish("t", message.NewMessage("warm-up", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	msgs := []*message.Message{message.NewMessage("a", []byte("a")), message.NewMessage("b", []byte("b"))}
	for _, m := range msgs {
		m.SetContext(ctx)
	}
	start := time.Now()
	err := pub.Publish("t", msgs...)
	took := time.Since(start)
	var pe *PublishError
	if !errors.As(err, &pe) || len(pe.Failed) != 2 {
		t.Fatalf("got %v, want both messages failed", err)
	}
	if took > 5*time.Second {
		t.Fatalf("Publish took %v with the broker gone", took)
	}
	t.Logf("failed after %v: %v", took, err)
}

func TestPublisherClosed(t *testing.T) {
	brokers := kafkatest.InProcess(t)
	pub := NewPublisher(newTestClient(t, brokers, ClientConfig{}))
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("t", message.NewMessage("a", nil)); !errors.Is(err, ErrPublisherClosed) {
		t.Fatalf("got %v", err)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	msg := message.NewMessage("id-1", []byte("payload"))
	msg.Metadata.Set(KeyMetadata, "\x00binary\xffkey")
	msg.Metadata.Set("b", "2")
	msg.Metadata.Set("a", "1")
	r := Marshal("topic", msg)
	if string(r.Key) != "\x00binary\xffkey" || r.Topic != "topic" || string(r.Value) != "payload" {
		t.Fatalf("record %+v", r)
	}
	var names []string
	for _, h := range r.Headers {
		names = append(names, h.Key)
	}
	if got := strings.Join(names, ","); got != UUIDHeader+",a,b" {
		t.Fatalf("headers %s", got)
	}
	back := Unmarshal(r)
	if back.UUID != "id-1" || back.Metadata[KeyMetadata] != "\x00binary\xffkey" || back.Metadata["a"] != "1" || len(back.Metadata) != 3 {
		t.Fatalf("message %+v", back)
	}
}
