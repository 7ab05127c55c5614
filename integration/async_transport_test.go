package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
	"github.com/sink-io/sink/internal/testkit/sinktest"
)

// asyncTransport is one Watermill Pub/Sub that carries the mutation log
// between the queue and the worker's Router. The async tests that do not
// depend on Kafka's durability run on every transport (like Watermill's
// universal Pub/Sub tests): the Kafka subscriber (kafka.Subscriber, batches
// of a poll) and Watermill's in-memory GoChannel (batches of one).
type asyncTransport struct {
	name string
	// offsets reports whether dead letters carry the source offset.
	offsets bool
	brokers []string
	// startAll starts Sink in all mode on this transport.
	startAll func(t *testing.T, extra map[string]string, opts ...fx.Option) *sinktest.Server
	// publish puts messages on the mutation log as another producer would.
	publish func(t *testing.T, msgs ...*message.Message)
	// pub publishes to the transport (for kafka.Replay).
	pub func(t *testing.T) message.Publisher
	// deadLetters returns the dead letters once there are n, in order.
	deadLetters func(t *testing.T, n int) []kafka.DeadLetter
}

// forEachTransport runs test as a subtest per transport, each with a fresh
// broker (partitions partitions per topic) and Pub/Sub.
func forEachTransport(t *testing.T, partitions int, test func(t *testing.T, tr *asyncTransport)) {
	t.Run("kafka", func(t *testing.T) {
		brokers := kafkatest.InProcess(t, kafkatest.Topics(asyncTopic, asyncDLT), kafkatest.Partitions(partitions))
		raw, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(raw.Close)
		pub := kafka.NewPublisher(raw)
		test(t, &asyncTransport{
			name: "kafka", offsets: true, brokers: brokers,
			startAll: func(t *testing.T, extra map[string]string, opts ...fx.Option) *sinktest.Server {
				return asyncStartAll(t, brokers, extra, opts...)
			},
			publish: func(t *testing.T, msgs ...*message.Message) {
				t.Helper()
				if err := pub.Publish(asyncTopic, msgs...); err != nil {
					t.Fatal(err)
				}
			},
			pub: func(*testing.T) message.Publisher { return pub },
			deadLetters: func(t *testing.T, n int) []kafka.DeadLetter {
				t.Helper()
				var letters []kafka.DeadLetter
				eventually(t, 30*time.Second, fmt.Sprintf("%d dead letters", n), func() (bool, string) {
					var err error
					letters, err = kafka.ReadDeadLetters(context.Background(), brokers, asyncDLT)
					if err != nil {
						return false, err.Error()
					}
					return len(letters) >= n, fmt.Sprintf("%d dead letters", len(letters))
				})
				return letters
			},
		})
	})
	t.Run("gochannel", func(t *testing.T) {
		// The configuration still names a broker (the Kafka client is
		// created), but the mutation log and the dead letters are on the
		// GoChannel.
		brokers := kafkatest.InProcess(t, kafkatest.Partitions(partitions))
		// Publish returns once the worker acked each message: the log is
		// delivered in order, one message at a time. Dead letters have
		// their own Pub/Sub, persistent so that a later subscriber reads
		// them all.
		gc := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
		dlq := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
		t.Cleanup(func() { _ = gc.Close(); _ = dlq.Close() })
		test(t, &asyncTransport{
			name: "gochannel", brokers: brokers,
			startAll: func(t *testing.T, extra map[string]string, opts ...fx.Option) *sinktest.Server {
				return asyncStartAll(t, brokers, extra, append(opts, bootstrap.QueuePubSub(gc, gc, dlq))...)
			},
			publish: func(t *testing.T, msgs ...*message.Message) {
				t.Helper()
				if err := gc.Publish(asyncTopic, msgs...); err != nil {
					t.Fatal(err)
				}
			},
			pub: func(*testing.T) message.Publisher { return gc },
			deadLetters: func(t *testing.T, n int) []kafka.DeadLetter {
				t.Helper()
				// Persistent: a new subscriber gets every dead letter so far.
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				ch, err := dlq.Subscribe(ctx, asyncDLT)
				if err != nil {
					t.Fatal(err)
				}
				var letters []kafka.DeadLetter
				for len(letters) < n {
					select {
					case msg := <-ch:
						msg.Ack()
						r := kafka.Marshal(asyncDLT, msg)
						r.Offset = int64(len(letters))
						letters = append(letters, kafka.ParseDeadLetter(r))
					case <-ctx.Done():
						t.Fatalf("%d of %d dead letters after 30 s", len(letters), n)
					}
				}
				return letters
			},
		})
		// The mutation log never touched Kafka.
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), asyncTopic, asyncDLT)
		if err != nil {
			t.Fatal(err)
		}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil && o.Offset > 0 {
				t.Errorf("the GoChannel run wrote %d records to Kafka topic %s", o.Offset, o.Topic)
			}
		})
	})
}
