package integration_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/adapters/mergepatch"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

const benchBatch = 500

// benchMutations returns n mutations (puts and merge-patch merges) over
// records records, with fresh ids.
func benchMutations(n, records int, tag string) []domain.Mutation {
	muts := make([]domain.Mutation, n)
	for i := range muts {
		a := domain.Address{Store: "primary", Namespace: "bench", Dataset: "docs", Key: domain.StringKey(fmt.Sprintf("r%04d", i%records))}
		m := domain.Mutation{ID: fmt.Sprintf("%s-%06d", tag, i), Address: a, SubmittedAt: time.Now()}
		if i%3 == 0 {
			m.Kind = domain.MutationPut
			m.Document = domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(fmt.Sprintf(`{"i":%d,"payload":"%0100d"}`, i, i))}
		} else {
			m.Kind = domain.MutationMerge
			m.Merge = domain.MergeIntent{Profile: mergepatch.Name, Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(fmt.Sprintf(`{"m%d":%d}`, i%7, i))}}
		}
		muts[i] = m
	}
	return muts
}

// benchRedeliverable gives the mutations of wave i what the worker's
// mutations carry: fresh ids (a repeated id would be skipped as a
// redelivery) and log positions after every earlier wave's (one partition
// of one log; offsets only grow), so that each wave is applied in full and
// records its applied marks. It modifies muts in place and returns it.
func benchRedeliverable(muts []domain.Mutation, i int) []domain.Mutation {
	for j := range muts {
		muts[j].ID = "apply-" + strconv.Itoa(i) + "-" + strconv.Itoa(j)
		muts[j].Source = domain.SourcePosition{Log: "bench-log", Partition: 0, Offset: int64(i*len(muts) + j)}
	}
	return muts
}

func reportRate(b *testing.B, perOp int, unit string) {
	b.ReportMetric(float64(perOp*b.N)/b.Elapsed().Seconds(), unit)
}

// BenchmarkAsyncAccept500 measures accepted operations per second for
// 500-operation asynchronous batches against one in-process broker
// (acks=all everywhere):
//   - queue-franz-batch: the Sink queue (kafka.Queue) on its batch
//     publisher (franz-go, all records produced together);
//   - queue-watermill-kafka-sarama: the same queue on the stock
//     watermill-kafka publisher (a synchronous Sarama producer, one message
//     at a time);
//   - raw-franz-produce-sync: franz-go ProduceSync of the same 500 records;
//   - grpc-server: a gRPC Write of 500 operations with
//     RETURN_AFTER_ACCEPTED to a server process (validation included).
func BenchmarkAsyncAccept500(b *testing.B) {
	brokers := kafkatest.InProcess(b, kafkatest.Topics("bench"), kafkatest.Partitions(8))
	muts := benchMutations(benchBatch, 100, "acc")
	newMuts := func(i int) []domain.Mutation {
		out := make([]domain.Mutation, len(muts))
		copy(out, muts)
		for j := range out {
			out[j].ID = fmt.Sprintf("acc-%d-%d", i, j)
		}
		return out
	}
	submit := func(b *testing.B, q *kafka.Queue) {
		b.Helper()
		for i := 0; b.Loop(); i++ {
			for j, err := range q.Submit(context.Background(), newMuts(i)) {
				if err != nil {
					b.Fatalf("mutation %d: %v", j, err)
				}
			}
		}
		reportRate(b, benchBatch, "ops/s")
	}

	b.Run("queue-franz-batch", func(b *testing.B) {
		cl, err := kafka.NewClient(kafka.ClientConfig{Brokers: brokers})
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		q, _ := kafka.NewQueue(kafka.NewPublisher(cl), kafka.QueueConfig{Topic: "bench"})
		submit(b, q)
	})
	b.Run("queue-watermill-kafka-sarama", func(b *testing.B) {
		sc := wmkafka.DefaultSaramaSyncPublisherConfig()
		sc.Producer.RequiredAcks = sarama.WaitForAll
		pub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{
			Brokers: brokers,
			Marshaler: wmkafka.NewWithPartitioningMarshaler(func(_ string, msg *message.Message) (string, error) {
				return msg.Metadata.Get(kafka.KeyMetadata), nil
			}),
			OverwriteSaramaConfig: sc,
		}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer pub.Close()
		q, _ := kafka.NewQueue(pub, kafka.QueueConfig{Topic: "bench"})
		submit(b, q)
	})
	b.Run("raw-franz-produce-sync", func(b *testing.B) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		recs := make([]*kgo.Record, len(muts))
		for i := 0; b.Loop(); i++ {
			for j, m := range newMuts(i) {
				v, err := kafka.EncodeMutation(m)
				if err != nil {
					b.Fatal(err)
				}
				recs[j] = &kgo.Record{Topic: "bench", Key: domain.EncodeAddress(m.Address), Value: v}
			}
			if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, benchBatch, "ops/s")
	})
	b.Run("grpc-server", func(b *testing.B) {
		s := sinktest.Start(b, map[string]string{
			"SINK_MODE": bootstrap.ModeServer, "SINK_KAFKA_BROKERS": brokers[0], "SINK_KAFKA_TOPIC": "bench",
			"SINK_LOG_LEVEL": "error",
		})
		ops := make([]*sinkv1.WriteOperation, benchBatch)
		for j := range ops {
			a := addr("bench", "docs", fmt.Sprintf("r%04d", j%100))
			if j%3 == 0 {
				ops[j] = putOp(a, fmt.Sprintf(`{"i":%d,"payload":"%0100d"}`, j, j), sinkv1.PutMode_PUT_MODE_UPSERT, nil)
			} else {
				ops[j] = mergeOp(a, mergepatch.Name, fmt.Sprintf(`{"m%d":%d}`, j%7, j))
			}
		}
		for b.Loop() {
			resp, err := asyncWrite(context.Background(), s.Client, ops...)
			if err != nil {
				b.Fatal(err)
			}
			for j, r := range resp.GetResults() {
				if r.GetStatus() != accepted {
					b.Fatalf("operation %d: %v %v", j, r.GetStatus(), r.GetError())
				}
			}
		}
		reportRate(b, benchBatch, "ops/s")
	})
}

// BenchmarkWorkerApply measures the worker's apply rate: ApplyMutations on
// 500-mutation batches (dependency waves, one storage read and write per
// wave) against the same mutations applied one at a time (one
// ApplyMutations call each). 500 mutations over 100 records make batches of
// 5 waves. Every iteration's mutations have fresh ids and later log
// positions, as the worker's have, so every write also records the
// record's applied mark (the cost of effectively-once application is
// included). On plain memory storage a call costs almost nothing;
// "memory-rtt-1ms" adds a simulated 1 ms round trip to every storage call,
// as a networked database would.
func BenchmarkWorkerApply(b *testing.B) {
	for _, rtt := range []time.Duration{0, time.Millisecond} {
		name := "memory"
		if rtt > 0 {
			name = "memory-rtt-" + rtt.String()
		}
		newService := func(b *testing.B) *application.Service {
			var st ports.Storage = memory.New()
			if rtt > 0 {
				st = storagetest.NewDelayed(st, rtt)
			}
			svc, err := application.NewService(application.DefaultConfig(), st, []ports.MergeProfile{mergepatch.New()},
				application.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				b.Fatal(err)
			}
			return svc
		}
		muts := benchMutations(benchBatch, 100, "apply")
		check := func(b *testing.B, out []ports.ApplyOutcome) {
			for j, o := range out {
				if o.Err != nil {
					b.Fatalf("mutation %d: %v", j, o.Err)
				}
			}
		}
		b.Run(name+"/waves-500", func(b *testing.B) {
			svc := newService(b)
			for i := 0; b.Loop(); i++ {
				check(b, svc.ApplyMutations(context.Background(), benchRedeliverable(muts, i)))
			}
			reportRate(b, benchBatch, "mutations/s")
		})
		b.Run(name+"/one-at-a-time", func(b *testing.B) {
			svc := newService(b)
			for i := 0; b.Loop(); i++ {
				benchRedeliverable(muts, i)
				for j := range muts {
					check(b, svc.ApplyMutations(context.Background(), muts[j:j+1]))
				}
			}
			reportRate(b, benchBatch, "mutations/s")
		})
	}
}
