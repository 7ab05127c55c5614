package application

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// BenchmarkContendedPuts measures synchronous single-record puts from many
// concurrent callers (16 per processor) on 8 records of one shard, on
// memory storage with natural batching: batches of several callers form,
// led by callers with a deadline (which may leave them: see
// combiner.lead).
func BenchmarkContendedPuts(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Batch = BatchPolicy{Enabled: true, MaxOps: 1000, Shards: 1}
	s, err := NewService(cfg, memory.New(), []ports.MergeProfile{listProfile{}}, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	doc := domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"payload":"x"}`)}
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			m := domain.Mutation{Kind: domain.MutationPut, Address: listAddr(strconv.Itoa(int(i % 8))), Document: doc}
			res, err := s.Write(ctx, []domain.Mutation{m}, WaitUntilApplied)
			cancel()
			if err != nil || res[0].Status != StatusApplied {
				b.Error(err, res)
				return
			}
		}
	})
}
