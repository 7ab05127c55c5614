package kafkatest_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/internal/testkit/kafkatest"
)

// BenchmarkProduceBatch500 measures batched produce throughput against an
// in-process kfake broker: each op is one ProduceSync of 500 records of
// 1 KiB with acks=all (idempotent, no compression). It reports records/s.
func BenchmarkProduceBatch500(b *testing.B) {
	const (
		topic = "bench"
		batch = 500
		size  = 1024
	)
	addrs := kafkatest.InProcess(b, kafkatest.Topics(topic), kafkatest.Partitions(1))
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addrs...),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()

	value := make([]byte, size)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	recs := make([]*kgo.Record, batch)
	ctx := context.Background()
	// Warm up: metadata, connection, producer ID.
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
		b.Fatal(err)
	}

	b.SetBytes(batch * size)
	b.ReportAllocs()
	for b.Loop() {
		for i := range recs {
			recs[i] = &kgo.Record{Value: value}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
}
