package application

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// BenchmarkApplyMutations500 measures the worker path: batches of 500
// queued mutations (half puts, half list merges, over 250 records, each
// with its own id and log position) applied by ApplyMutations on memory
// storage, with natural batching on.
func BenchmarkApplyMutations500(b *testing.B) {
	s, err := NewService(DefaultConfig(), memory.New(), []ports.MergeProfile{listProfile{}}, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	off := int64(0)
	batch := func() []domain.Mutation {
		muts := make([]domain.Mutation, 500)
		for i := range muts {
			k := fmt.Sprint(i % 250)
			if i < 250 {
				muts[i] = listPut(k, "p")
			} else {
				muts[i] = listMerge(k, "m")
			}
			muts[i].Address.Store = "primary"
			muts[i].ID = NewMutationID()
			muts[i].Source = domain.SourcePosition{Log: "bench", Partition: int32(i % 4), Offset: off}
			off++
		}
		return muts
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		muts := batch()
		b.StartTimer()
		for _, o := range s.ApplyMutations(context.Background(), muts) {
			if o.Err != nil {
				b.Fatal(o.Err)
			}
		}
	}
}
