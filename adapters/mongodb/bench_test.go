package mongodb_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mergebench"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/ports"
)

// The benchmarks run the same operations, against the same server in the
// same run, through Sink's storage adapter ("store"), through the
// application service over that adapter ("service"), and through the raw
// driver ("raw"), and report each path's time per operation and the ratios
// store/raw and service/raw:
//
//	go test ./adapters/mongodb/ -run '^$' -bench . -benchtime 20x

const benchBatch = 500

type benchEnv struct {
	ctx   context.Context
	store *mongodb.Store
	svc   *application.Service
	raw   *mongo.Collection
	db    string
	// payload is a 1 KB client document (without _id).
	payload bson.Raw
	// bulkChunk is the store's bulk size, which the raw path uses too.
	bulkChunk int
}

func newBenchEnv(b *testing.B) *benchEnv {
	srv := mongotest.Shared(b)
	c := client(b, srv.URI())
	db := freshDatabase(b, c)
	s := newStore(b, c, mongodb.Options{})
	b.Logf("server: %s (%s)", srv.Kind(), srv.URI())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	b.Cleanup(cancel)
	return &benchEnv{
		ctx:       ctx,
		store:     s,
		svc:       newService(b, s, nil),
		raw:       c.Database(db).Collection("raw"),
		db:        db,
		payload:   mustMarshal(b, bson.D{{Key: "n", Value: int64(1)}, {Key: "blob", Value: bson.Binary{Data: make([]byte, 1000)}}}),
		bulkChunk: map[bool]int{true: mongodb.FerretDBBulkChunk, false: mongodb.DefaultBulkChunk}[srv.IsFerretDB()],
	}
}

func (e *benchEnv) addr(dataset string, i int) domain.Address {
	return domain.Address{Store: "primary", Namespace: e.db, Dataset: dataset, Key: domain.StringKey(fmt.Sprintf("key-%04d", i))}
}

func (e *benchEnv) doc() domain.Document {
	return domain.Document{ContentType: domain.ContentTypeBSON, Data: e.payload}
}

// rawDoc is the document the raw path stores: _id plus the same fields plus
// a version that changes on every write, as Sink's revision does (servers
// skip replacements that change nothing, which would flatter the raw path).
func (e *benchEnv) rawDoc(i int) bson.D {
	return bson.D{{Key: "_id", Value: fmt.Sprintf("key-%04d", i)}, {Key: "n", Value: int64(1)}, {Key: "blob", Value: bson.Binary{Data: make([]byte, 1000)}},
		{Key: "version", Value: bson.NewObjectID()}}
}

func (e *benchEnv) storePut(b *testing.B, n int) {
	ops := make([]ports.WriteOp, n)
	for i := range ops {
		ops[i] = ports.WriteOp{Kind: ports.WritePut, Address: e.addr("store", i), Document: e.doc()}
	}
	for i, r := range e.store.Write(e.ctx, ops) {
		if r.Err != nil {
			b.Fatalf("store put %d: %v", i, r.Err)
		}
	}
}

func (e *benchEnv) servicePut(b *testing.B, n int) {
	muts := make([]domain.Mutation, n)
	for i := range muts {
		muts[i] = domain.Mutation{Kind: domain.MutationPut, Address: e.addr("service", i), Document: e.doc()}
	}
	res, err := e.svc.Write(e.ctx, muts, application.WaitUntilApplied)
	if err != nil {
		b.Fatal(err)
	}
	for i, r := range res {
		if r.Status != application.StatusApplied {
			b.Fatalf("service put %d: %s %v", i, r.Status, r.Err)
		}
	}
}

var rawBulkOpts = options.BulkWrite().SetOrdered(false)

// rawPut replaces n records with the raw driver the way a careful
// application would on this server: unordered bulks of ReplaceOne upserts,
// the store's bulk size at a time, one after the other (FerretDB stops
// answering when about 100 documents are modified at once).
func (e *benchEnv) rawPut(b *testing.B, n int) {
	if n == 1 {
		if _, err := e.raw.ReplaceOne(e.ctx, bson.D{{Key: "_id", Value: "key-0000"}}, e.rawDoc(0), options.Replace().SetUpsert(true)); err != nil {
			b.Fatal(err)
		}
		return
	}
	for lo := 0; lo < n; lo += e.bulkChunk {
		hi := min(n, lo+e.bulkChunk)
		models := make([]mongo.WriteModel, 0, hi-lo)
		for i := lo; i < hi; i++ {
			models = append(models, mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: fmt.Sprintf("key-%04d", i)}}).SetReplacement(e.rawDoc(i)).SetUpsert(true))
		}
		if _, err := e.raw.BulkWrite(e.ctx, models, rawBulkOpts); err != nil {
			b.Fatal(err)
		}
	}
}

func (e *benchEnv) storeRead(b *testing.B) {
	addrs := make([]domain.Address, benchBatch)
	for i := range addrs {
		addrs[i] = e.addr("store", i)
	}
	for i, r := range e.store.Read(e.ctx, addrs) {
		if r.Err != nil || !r.Found {
			b.Fatalf("store read %d: %v", i, r.Err)
		}
	}
}

func (e *benchEnv) serviceRead(b *testing.B) {
	addrs := make([]domain.Address, benchBatch)
	for i := range addrs {
		addrs[i] = e.addr("service", i)
	}
	res, err := e.svc.Read(e.ctx, addrs)
	if err != nil {
		b.Fatal(err)
	}
	for i, r := range res {
		if r.Status != application.StatusFound {
			b.Fatalf("service read %d: %s %v", i, r.Status, r.Err)
		}
	}
}

func (e *benchEnv) rawRead(b *testing.B) {
	ids := make(bson.A, benchBatch)
	for i := range ids {
		ids[i] = fmt.Sprintf("key-%04d", i)
	}
	cur, err := e.raw.Find(e.ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for cur.Next(e.ctx) {
		_ = append([]byte(nil), cur.Current...)
		n++
	}
	if err := cur.Err(); err != nil || n != benchBatch {
		b.Fatalf("raw read: %d documents, %v", n, err)
	}
	_ = cur.Close(e.ctx)
}

// paths times the three paths of one benchmark, interleaved so that server
// drift affects them alike.
type paths struct {
	names [3]string
	times [3][]time.Duration
}

func (p *paths) run(i int, fn func()) {
	start := time.Now()
	fn()
	p.times[i] = append(p.times[i], time.Since(start))
}

func mean(ds []time.Duration) float64 {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return float64(sum) / float64(len(ds))
}

func percentile(ds []time.Duration, p float64) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(p*float64(len(s))))])
}

// reportMeans reports mean time per call (ms) per path and the ratios to raw.
func (p *paths) reportMeans(b *testing.B) {
	raw := mean(p.times[2])
	for i, name := range p.names {
		b.ReportMetric(mean(p.times[i])/1e6, name+"-ms/op")
	}
	b.ReportMetric(mean(p.times[0])/raw, "store/raw")
	b.ReportMetric(mean(p.times[1])/raw, "service/raw")
}

func BenchmarkBatchPut500x1KB(b *testing.B) {
	e := newBenchEnv(b)
	// Warm up: the first round creates the records; the timed rounds replace them.
	e.storePut(b, benchBatch)
	e.servicePut(b, benchBatch)
	e.rawPut(b, benchBatch)
	p := paths{names: [3]string{"store", "service", "raw"}}
	b.ResetTimer()
	for b.Loop() {
		p.run(0, func() { e.storePut(b, benchBatch) })
		p.run(1, func() { e.servicePut(b, benchBatch) })
		p.run(2, func() { e.rawPut(b, benchBatch) })
	}
	p.reportMeans(b)
}

func BenchmarkBatchRead500(b *testing.B) {
	e := newBenchEnv(b)
	e.storePut(b, benchBatch)
	e.servicePut(b, benchBatch)
	e.rawPut(b, benchBatch)
	p := paths{names: [3]string{"store", "service", "raw"}}
	b.ResetTimer()
	for b.Loop() {
		p.run(0, func() { e.storeRead(b) })
		p.run(1, func() { e.serviceRead(b) })
		p.run(2, func() { e.rawRead(b) })
	}
	p.reportMeans(b)
}

func BenchmarkSinglePut(b *testing.B) {
	e := newBenchEnv(b)
	e.storePut(b, 1)
	e.servicePut(b, 1)
	e.rawPut(b, 1)
	p := paths{names: [3]string{"store", "service", "raw"}}
	b.ResetTimer()
	for b.Loop() {
		p.run(0, func() { e.storePut(b, 1) })
		p.run(1, func() { e.servicePut(b, 1) })
		p.run(2, func() { e.rawPut(b, 1) })
	}
	for i, name := range p.names {
		b.ReportMetric(percentile(p.times[i], 0.50)/1e3, name+"-p50-µs")
		b.ReportMetric(percentile(p.times[i], 0.99)/1e3, name+"-p99-µs")
	}
	rawP50 := percentile(p.times[2], 0.50)
	b.ReportMetric(percentile(p.times[0], 0.50)/rawP50, "store/raw-p50")
	b.ReportMetric(percentile(p.times[1], 0.50)/rawP50, "service/raw-p50")
}

// BenchmarkBatchPutMarked500x1KB records what applied marks cost the
// store's batch of 500 (100 on FerretDB) unconditional puts (the worker's writes): "plain" puts
// without a mark on records without one (one bulk update per chunk),
// "marked" puts with a mark, as the worker sends them (one find of the
// hidden fields plus one bulk write per chunk), and "plain-on-marked" puts
// without a mark on records that have one, as synchronous writes after the
// worker's (the bulk update, then a find and a bulk write carrying the
// marks over).
func BenchmarkBatchPutMarked500x1KB(b *testing.B) {
	e := newBenchEnv(b)
	// One store per path: on FerretDB the first update bulk that meets a
	// record with a mark makes that store send upserts one by one (see
	// bulkCommand), which must not slow the other paths down.
	srv := mongotest.Shared(b)
	stores := map[string]*mongodb.Store{}
	for _, name := range []string{"plain", "marked", "plain-on-marked"} {
		stores[name] = newStore(b, client(b, srv.URI()), mongodb.Options{})
	}
	// FerretDB evaluates filters other than a bare _id by scanning the
	// collection, so conditional replaces cost a scan each there: keep its
	// batches smaller (the per-record metrics compare across sizes).
	n := benchBatch
	if srv.IsFerretDB() {
		n = 100
	}
	offset := int64(0)
	put := func(dataset string, marked bool) {
		ops := make([]ports.WriteOp, n)
		for i := range ops {
			ops[i] = ports.WriteOp{Kind: ports.WritePut, Address: e.addr(dataset, i), Document: e.doc()}
			if marked {
				offset++
				ops[i].Mark = &ports.MarkUpdate{IDs: []string{fmt.Sprintf("mutation-%d", offset)},
					Position: domain.SourcePosition{Log: "bench", Offset: offset}, Keep: domain.DefaultAppliedRing}
			}
		}
		for i, r := range stores[dataset].Write(e.ctx, ops) {
			if r.Err != nil {
				b.Fatalf("put %d: %v", i, r.Err)
			}
		}
	}
	put("plain", false)
	put("marked", true)
	put("plain-on-marked", true)
	p := paths{names: [3]string{"plain", "marked", "plain-on-marked"}}
	b.ResetTimer()
	for b.Loop() {
		p.run(0, func() { put("plain", false) })
		p.run(1, func() { put("marked", true) })
		p.run(2, func() { put("plain-on-marked", false) })
	}
	plain := mean(p.times[0])
	for i, name := range p.names {
		b.ReportMetric(mean(p.times[i])/1e6, name+"-ms/op")
		b.ReportMetric(mean(p.times[i])/1e3/float64(n), name+"-µs/record")
	}
	b.ReportMetric(mean(p.times[1])/plain, "marked/plain")
	b.ReportMetric(mean(p.times[2])/plain, "plain-on-marked/plain")
}

// BenchmarkMergeContention: 16 clients merging through the application
// (counting profile, BSON documents) into one hot record, or spread over
// 100 records, the same cases as the PostgreSQL adapter's
// (mergebench.Run):
//
//	go test ./adapters/mongodb/ -run '^$' -bench MergeContention -benchtime 2000x
func BenchmarkMergeContention(b *testing.B) {
	srv := mongotest.Shared(b)
	c := client(b, srv.URI())
	for _, keys := range []int{1, 100} {
		b.Run(mergebench.Name(keys), func(b *testing.B) {
			mergebench.Run(b, newStore(b, c, mongodb.Options{}), freshDatabase(b, c), "hot", keys, domain.ContentTypeBSON)
		})
	}
}
