package memory_test

import (
	"context"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/scanbench"
	"github.com/sink-io/sink/ports"
)

// BenchmarkScan scans 100,000 JSON records of 1 KB through the application
// service over the memory store (pages of 1,000), without and with a
// filter, and reports records/s; -benchmem's allocs/op divided by 100,000
// is the allocations per record:
//
//	go test ./adapters/memory/ -run '^$' -bench Scan -benchtime 3x -benchmem
func BenchmarkScan(b *testing.B) {
	const n = 100_000
	st := memory.New()
	cfg := application.DefaultConfig()
	var ops []ports.WriteOp
	for i := range n {
		ops = append(ops, ports.WriteOp{Kind: ports.WritePut, Address: domain.Address{Store: cfg.Store, Namespace: "n", Dataset: "d", Key: domain.Int64Key(int64(i))},
			Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: scanbench.JSONDoc(i)}})
	}
	for _, r := range st.Write(context.Background(), ops) {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	svc, err := application.NewService(cfg, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		filter *domain.Filter
		want   int
	}{
		{"all", nil, n},
		{"filter", &domain.Filter{Op: domain.FilterLt, Path: []string{"n"}, Value: domain.IntValue(1000)}, 1000},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if got := scanbench.Scan(context.Background(), b, svc, domain.ScanSpec{Dataset: domain.DatasetRef{Namespace: "n", Dataset: "d"}, Filter: c.filter}); got != c.want {
					b.Fatalf("%d records, want %d", got, c.want)
				}
			}
			scanbench.ReportRate(b, n, "scanned-records/s")
		})
	}
}
