package mongodb_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/internal/testkit/scanbench"
)

// BenchmarkScan compares a whole scan of a dataset through Sink (the
// application's scan over the adapter, pages of 1,000: all pages in one
// call as the Scan RPC streams them, and one call per page as a client
// resuming from each page's cursor does) with the
// raw driver reading the same records in the same order (_id ascending),
// and a count with and without a filter. SINK_BENCH_SCAN_RECORDS sets the
// number of 1 KB records (default 100,000):
//
//	go test ./adapters/mongodb/ -run '^$' -bench 'Scan|Count' -benchtime 3x
func BenchmarkScan(b *testing.B) {
	env := newScanBench(b)
	spec := domain.ScanSpec{Dataset: env.dataset}
	b.Run("sink", func(b *testing.B) {
		for b.Loop() {
			if n := scanbench.Scan(env.ctx, b, env.svc, spec); n != env.n {
				b.Fatalf("scanned %d records, want %d", n, env.n)
			}
		}
		scanbench.ReportRate(b, env.n, "records/s")
	})
	b.Run("sink-call-per-page", func(b *testing.B) {
		for b.Loop() {
			if n := scanbench.ScanCallPerPage(env.ctx, b, env.svc, spec); n != env.n {
				b.Fatalf("scanned %d records, want %d", n, env.n)
			}
		}
		scanbench.ReportRate(b, env.n, "records/s")
	})
	b.Run("raw", func(b *testing.B) {
		for b.Loop() {
			cur, err := env.coll.Find(env.ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(domain.MaxScanPageSize))
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for cur.Next(env.ctx) {
				n++
			}
			if err := cur.Err(); err != nil || n != env.n {
				b.Fatalf("read %d records: %v", n, err)
			}
			_ = cur.Close(env.ctx)
		}
		scanbench.ReportRate(b, env.n, "records/s")
	})
}

func BenchmarkCount(b *testing.B) {
	env := newScanBench(b)
	filtered := domain.ScanSpec{Dataset: env.dataset, Filter: &domain.Filter{Op: domain.FilterLt, Path: []string{"n"}, Value: domain.IntValue(100)}}
	for _, c := range []struct {
		name string
		run  func() int64
	}{
		{"sink", func() int64 { return scanbench.Count(env.ctx, b, env.svc, domain.ScanSpec{Dataset: env.dataset}) }},
		{"raw", func() int64 {
			n, err := env.coll.CountDocuments(env.ctx, bson.D{})
			if err != nil {
				b.Fatal(err)
			}
			return n
		}},
		{"sink-filter", func() int64 { return scanbench.Count(env.ctx, b, env.svc, filtered) }},
		{"raw-filter", func() int64 {
			n, err := env.coll.CountDocuments(env.ctx, bson.D{{Key: "n", Value: bson.D{{Key: "$lt", Value: 100}}}})
			if err != nil {
				b.Fatal(err)
			}
			return n
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if n := c.run(); n != int64(env.n) && n != int64(min(env.n, 100)) {
					b.Fatalf("count %d", n)
				}
			}
		})
	}
}

type scanBench struct {
	ctx     context.Context
	svc     *application.Service
	coll    *mongo.Collection
	dataset domain.DatasetRef
	n       int
}

func newScanBench(b *testing.B) *scanBench {
	b.Helper()
	n := scanbench.Records(b)
	srv := mongotest.Shared(b)
	c := client(b, srv.URI())
	db := freshDatabase(b, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	b.Cleanup(cancel)
	coll := c.Database(db).Collection("scan")
	blob := make([]byte, 1000)
	var docs []any
	for i := range n {
		docs = append(docs, bson.D{{Key: "_id", Value: int64(i)}, {Key: "n", Value: int64(i)}, {Key: "blob", Value: bson.Binary{Data: blob}}})
		if len(docs) == 1000 || i == n-1 {
			if _, err := coll.InsertMany(ctx, docs); err != nil {
				b.Fatal(err)
			}
			docs = docs[:0]
		}
	}
	b.Logf("server: %s, %d records of 1 KB", srv.Kind(), n)
	s := newStore(b, c, mongodb.Options{})
	return &scanBench{ctx: ctx, svc: newService(b, s, nil), coll: coll, dataset: domain.DatasetRef{Store: "primary", Namespace: db, Dataset: "scan"}, n: n}
}
