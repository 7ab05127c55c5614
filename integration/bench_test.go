package integration_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/internal/testkit/sinktest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// BenchmarkGRPCSingleWrite measures one-record puts through the real gRPC
// server on the memory adapter and reports p50/p99 latency.
func BenchmarkGRPCSingleWrite(b *testing.B) {
	s := sinktest.Start(b, nil)
	doc := `{"payload":"` + strings.Repeat("x", 1000) + `"}`
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{putOp(addr("bench", "single", fmt.Sprint(i%1000)), doc, 0, nil)}}
		start := time.Now()
		resp, err := s.Client.Write(context.Background(), req)
		lat = append(lat, time.Since(start))
		if err != nil || resp.Results[0].Status != applied {
			b.Fatalf("write: %v %v", resp, err)
		}
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

// BenchmarkGRPCBatch500 measures 500-operation batch puts and reads (1 KB
// documents) and reports operations per second, against Sink on memory
// storage and against the null server (the gRPC floor, internal/testkit/nullsink):
// put-null and read-null.
func BenchmarkGRPCBatch500(b *testing.B) {
	s := sinktest.Start(b, nil)
	null := startNull(b)
	doc := `{"payload":"` + strings.Repeat("x", 1000) + `"}`
	put := &sinkv1.WriteRequest{}
	get := &sinkv1.ReadRequest{}
	for i := 0; i < 500; i++ {
		a := addr("bench", "batch", fmt.Sprint(i))
		put.Operations = append(put.Operations, putOp(a, doc, 0, nil))
		get.Operations = append(get.Operations, &sinkv1.ReadOperation{Address: a})
	}
	b.Run("put", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			resp, err := s.Client.Write(context.Background(), put)
			if err != nil || resp.Results[499].Status != applied {
				b.Fatalf("batch put: %v", err)
			}
		}
		b.ReportMetric(float64(500*b.N)/b.Elapsed().Seconds(), "ops/s")
	})
	b.Run("put-null", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			resp, err := null.Write(context.Background(), put)
			if err != nil || resp.Results[499].Status != applied {
				b.Fatalf("batch put: %v", err)
			}
		}
		b.ReportMetric(float64(500*b.N)/b.Elapsed().Seconds(), "ops/s")
	})
	b.Run("read-null", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := null.Read(context.Background(), get); err != nil {
				b.Fatalf("batch read: %v", err)
			}
		}
		b.ReportMetric(float64(500*b.N)/b.Elapsed().Seconds(), "ops/s")
	})
	b.Run("read", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			resp, err := s.Client.Read(context.Background(), get)
			if err != nil || resp.Results[499].Status != found {
				b.Fatalf("batch read: %v", err)
			}
		}
		b.ReportMetric(float64(500*b.N)/b.Elapsed().Seconds(), "ops/s")
	})
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(p(0.50), "p50-µs")
	b.ReportMetric(p(0.99), "p99-µs")
}
