package integration_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/adapters/mergepatch"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
)

// BenchmarkWorkerRouter measures the worker end to end, Kafka included:
// b.N waves of 500 mutations (over 100 records) are queued on a 4-partition
// topic of an in-process broker, then consumed with polls of up to 500
// records and applied through the application service:
//   - router: Sink's worker, a Watermill Router over kafka.Subscriber with
//     the batch collector (kafka.Worker);
//   - hand-written-loop: the poll → decode → ApplyMutations → commit loop
//     the worker was before it became a Router (handLoop below).
//
// "memory" is plain memory storage, "memory-rtt-1ms" adds a simulated 1 ms
// round trip to every storage call.
func BenchmarkWorkerRouter(b *testing.B) {
	brokers := kafkatest.InProcess(b, kafkatest.Partitions(4))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	run := 0
	for _, rtt := range []time.Duration{0, time.Millisecond} {
		name := "memory"
		if rtt > 0 {
			name = "memory-rtt-" + rtt.String()
		}
		for _, impl := range []string{"hand-written-loop", "router"} {
			b.Run(name+"/"+impl, func(b *testing.B) {
				run++
				topic := fmt.Sprintf("bench-worker-%d", run)
				adm := kadm.NewClient(benchClient(b, brokers))
				if _, err := adm.CreateTopic(context.Background(), 4, 1, nil, topic); err != nil {
					b.Fatal(err)
				}
				q, _ := kafka.NewQueue(kafka.NewPublisher(benchClient(b, brokers)), kafka.QueueConfig{Topic: topic})
				for i := range b.N {
					for j, err := range q.Submit(context.Background(), benchMutations(benchBatch, 100, fmt.Sprintf("w%d-%d", run, i))) {
						if err != nil {
							b.Fatalf("mutation %d: %v", j, err)
						}
					}
				}
				var st ports.Storage = memory.New()
				var delayed *storagetest.Delayed
				if rtt > 0 {
					delayed = storagetest.NewDelayed(st, rtt)
					st = delayed
				}
				svc, err := application.NewService(application.DefaultConfig(), st, []ports.MergeProfile{mergepatch.New()}, application.WithLogger(quiet))
				if err != nil {
					b.Fatal(err)
				}
				cl, err := kafka.NewClient(kafka.ClientConfig{Brokers: brokers, GroupID: topic, Topic: topic, SessionTimeout: 6 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				defer cl.Close()
				total := int64(b.N * benchBatch)
				counted := &countingHandler{h: svc, total: total, done: make(chan struct{})}
				b.ResetTimer()
				if impl == "router" {
					sub, _ := kafka.NewSubscriber(cl, kafka.SubscriberConfig{Topic: topic, MaxPollRecords: benchBatch, Logger: quiet})
					w, err := kafka.NewWorker(sub, kafka.NewPublisher(cl), counted, kafka.WorkerConfig{Topic: topic, DeadLetterTopic: topic + ".dlq", Logger: quiet})
					if err != nil {
						b.Fatal(err)
					}
					if err := w.Start(); err != nil {
						b.Fatal(err)
					}
					<-counted.done
					b.StopTimer()
					b.ReportMetric(float64(w.Stats().Batches)/float64(b.N), "batches/op")
					b.ReportMetric(float64(sub.Stats().Pipelined)/float64(max(sub.Stats().Polls, 1)), "pipelined-polls")
					_ = w.Stop(context.Background())
				} else {
					handLoop(cl, counted, benchBatch)
					b.StopTimer()
					b.ReportMetric(float64(counted.batches.Load())/float64(b.N), "batches/op")
				}
				if delayed != nil {
					b.ReportMetric(float64(delayed.Stats().Calls())/float64(b.N), "storage-calls/op")
				}
				reportRate(b, benchBatch, "mutations/s")
			})
		}
	}
}

func benchClient(b *testing.B, brokers []string) *kgo.Client {
	cl, err := kafka.NewClient(kafka.ClientConfig{Brokers: brokers})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	return cl
}

// handLoop is the worker's former hand-written consume loop, reduced to its
// throughput path (no dead letters: every mutation applies): poll up to
// maxPoll records, decode them, apply them in one ApplyMutations call,
// commit, allow rebalances; until h is done.
func handLoop(cl *kgo.Client, h *countingHandler, maxPoll int) {
	for {
		select {
		case <-h.done:
			return
		default:
		}
		fetches := cl.PollRecords(context.Background(), maxPoll)
		recs := fetches.Records()
		muts := make([]domain.Mutation, 0, len(recs))
		for _, rec := range recs {
			msg := kafka.Unmarshal(rec)
			m, err := kafka.DecodeMutation(msg.Payload)
			if err != nil {
				continue
			}
			m.Source = domain.SourcePosition{Partition: rec.Partition, Offset: rec.Offset}
			muts = append(muts, m)
		}
		h.ApplyMutations(context.Background(), muts)
		if len(recs) > 0 {
			_ = cl.CommitRecords(context.Background(), recs...)
		}
		cl.AllowRebalance()
	}
}

// countingHandler closes done once total mutations were applied.
type countingHandler struct {
	h       ports.MutationHandler
	total   int64
	applied atomic.Int64
	batches atomic.Int64
	done    chan struct{}
}

func (c *countingHandler) ApplyMutations(ctx context.Context, muts []domain.Mutation) []ports.ApplyOutcome {
	out := c.h.ApplyMutations(ctx, muts)
	var n int64
	for _, o := range out {
		if o.Err == nil {
			n++
		}
	}
	c.batches.Add(1)
	if after := c.applied.Add(n); after >= c.total && after-n < c.total {
		close(c.done)
	}
	return out
}
