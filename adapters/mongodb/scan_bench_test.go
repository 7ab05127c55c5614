package mongodb_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mongotest"
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
			n := 0
			err := env.svc.ScanPages(env.ctx, &application.ScanRequest{Spec: spec, PageSize: domain.MaxScanPageSize}, 0, func(p *application.ScanPage) error {
				n += len(p.Records)
				return nil
			})
			if err != nil || n != env.n {
				b.Fatalf("scanned %d records, want %d: %v", n, env.n, err)
			}
		}
		b.ReportMetric(float64(env.n*b.N)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("sink-call-per-page", func(b *testing.B) {
		for b.Loop() {
			n := 0
			req := application.ScanRequest{Spec: spec, PageSize: domain.MaxScanPageSize}
			for {
				p, err := env.svc.Scan(env.ctx, &req)
				if err != nil {
					b.Fatal(err)
				}
				n += len(p.Records)
				if len(p.Cursor) == 0 {
					break
				}
				req.Cursor = p.Cursor
			}
			if n != env.n {
				b.Fatalf("scanned %d records, want %d", n, env.n)
			}
		}
		b.ReportMetric(float64(env.n*b.N)/b.Elapsed().Seconds(), "records/s")
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
		b.ReportMetric(float64(env.n*b.N)/b.Elapsed().Seconds(), "records/s")
	})
}

func BenchmarkCount(b *testing.B) {
	env := newScanBench(b)
	filtered := domain.ScanSpec{Dataset: env.dataset, Filter: &domain.Filter{Op: domain.FilterLt, Path: []string{"n"}, Value: domain.IntValue(100)}}
	for _, c := range []struct {
		name string
		run  func() int64
	}{
		{"sink", func() int64 {
			r, err := env.svc.Count(env.ctx, &application.CountRequest{Spec: domain.ScanSpec{Dataset: env.dataset}})
			if err != nil {
				b.Fatal(err)
			}
			return r.Count
		}},
		{"raw", func() int64 {
			n, err := env.coll.CountDocuments(env.ctx, bson.D{})
			if err != nil {
				b.Fatal(err)
			}
			return n
		}},
		{"sink-filter", func() int64 {
			r, err := env.svc.Count(env.ctx, &application.CountRequest{Spec: filtered})
			if err != nil {
				b.Fatal(err)
			}
			return r.Count
		}},
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
	n := 100_000
	if v := os.Getenv("SINK_BENCH_SCAN_RECORDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
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
