package application

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/adapters/mergepatch"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// BenchmarkSinglePut measures the application's cost of one single-record
// put on memory storage (no gRPC), with natural batching on and off.
func BenchmarkSinglePut(b *testing.B) {
	doc := domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"payload":"` + strings.Repeat("x", 1000) + `"}`)}
	for _, batch := range []bool{true, false} {
		b.Run(fmt.Sprintf("batch=%v", batch), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Batch.Enabled = batch
			s, err := NewService(cfg, memory.New(), []ports.MergeProfile{listProfile{}}, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				m := domain.Mutation{Kind: domain.MutationPut, Address: listAddr(fmt.Sprint(i % 1000)), Document: doc}
				res, err := s.Write(context.Background(), []domain.Mutation{m}, WaitUntilApplied)
				if err != nil || res[0].Status != StatusApplied {
					b.Fatal(err, res)
				}
			}
		})
	}
}

// BenchmarkSingleMergeAndRead measures the application's cost of one
// single-record merge (merge-patch on a small JSON record) and of one
// single-record read, on memory storage (no gRPC): the shapes of the
// merge and read cases of the gRPC single-operation benchmarks.
func BenchmarkSingleMergeAndRead(b *testing.B) {
	s, err := NewService(DefaultConfig(), memory.New(), []ports.MergeProfile{mergepatch.Profile{}}, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("merge", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			m := domain.Mutation{Kind: domain.MutationMerge, Address: listAddr(strconv.Itoa(i % 1000)), Merge: domain.MergeIntent{Profile: mergepatch.Name,
				Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: fmt.Appendf(nil, `{"n":%d}`, i)}}}
			res, err := s.Write(context.Background(), []domain.Mutation{m}, WaitUntilApplied)
			if err != nil || res[0].Status != StatusApplied {
				b.Fatal(err, res)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			res, err := s.Read(context.Background(), []domain.Address{listAddr(strconv.Itoa(i % 1000))})
			if err != nil || res[0].Status != StatusFound {
				b.Fatal(err, res)
			}
		}
	})
}

// BenchmarkBatchPut500 measures the application's cost of one 500-put
// request on memory storage (no gRPC).
func BenchmarkBatchPut500(b *testing.B) {
	doc := domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"payload":"` + strings.Repeat("x", 1000) + `"}`)}
	s, err := NewService(DefaultConfig(), memory.New(), []ports.MergeProfile{listProfile{}}, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	muts := make([]domain.Mutation, 500)
	for i := range muts {
		muts[i] = domain.Mutation{Kind: domain.MutationPut, Address: listAddr(fmt.Sprint(i)), Document: doc}
	}
	b.ReportAllocs()
	for b.Loop() {
		res, err := s.Write(context.Background(), muts, WaitUntilApplied)
		if err != nil || res[499].Status != StatusApplied {
			b.Fatal(err, res[499])
		}
	}
}

// BenchmarkFold8 measures the application's cost of a fold: one request of
// eight merge-patch merges of one small JSON record (the shape of a batch
// in the hot-key contention benchmark), on memory storage.
func BenchmarkFold8(b *testing.B) {
	s, err := NewService(DefaultConfig(), memory.New(), []ports.MergeProfile{mergepatch.Profile{}}, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	a := listAddr("hot")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		muts := make([]domain.Mutation, 8)
		for k := range muts {
			muts[k] = domain.Mutation{Kind: domain.MutationMerge, Address: a, Merge: domain.MergeIntent{Profile: mergepatch.Name,
				Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: fmt.Appendf(nil, `{"c%d":%d}`, (i*8+k)%16, i)}}}
		}
		res, err := s.Write(context.Background(), muts, WaitUntilApplied)
		if err != nil || res[7].Status != StatusApplied {
			b.Fatal(err, res)
		}
	}
}
