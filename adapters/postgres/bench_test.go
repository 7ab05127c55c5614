package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sink-io/sink/adapters/postgres"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mergebench"
	"github.com/sink-io/sink/ports"
)

// Adapter vs raw pgx doing the same work on the same server, one run,
// interleaved (go test -run '^$' -bench . ./adapters/postgres/); numbers in
// docs/postgres.md. Raw pgx writes a table of the same shape with the
// statement a hand-written program would use.

type benchEnv struct {
	s    *postgres.Store
	pool *pgxpool.Pool
	ops  []ports.WriteOp
	adds []domain.Address
	keys [][]byte
	cts  []string
	docs [][]byte
	revs [][]byte
}

func newBenchEnv(b *testing.B, n int) *benchEnv {
	p, _ := newPool(b, 16)
	e := &benchEnv{s: newStore(b, p, postgres.Options{}), pool: p}
	doc := domain.Document{ContentType: domain.ContentTypeJSON, Data: append(append([]byte(`{"p":"`), bytes.Repeat([]byte("x"), 1000)...), `"}`...)}
	for i := 0; i < n; i++ {
		a := domain.Address{Namespace: "bench", Dataset: "records", Key: domain.StringKey(fmt.Sprintf("key-%06d", i))}
		e.ops = append(e.ops, ports.WriteOp{Kind: ports.WritePut, Address: a, Document: doc})
		e.adds = append(e.adds, a)
		e.keys = append(e.keys, append([]byte("s"), fmt.Sprintf("key-%06d", i)...))
		e.cts = append(e.cts, doc.ContentType)
		e.docs = append(e.docs, doc.Data)
		e.revs = append(e.revs, bytes.Repeat([]byte{byte(i)}, 16))
	}
	ctx := context.Background()
	if _, err := p.Exec(ctx, `CREATE SCHEMA raw; CREATE TABLE raw.records (k bytea PRIMARY KEY, content_type text NOT NULL, doc bytea NOT NULL, rev bytea NOT NULL, mark bytea)`); err != nil {
		b.Fatal(err)
	}
	for _, r := range e.s.Write(ctx, e.ops) {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	e.rawPut(b, e.keys, e.cts, e.docs, e.revs)
	return e
}

const rawUpsert = `INSERT INTO raw.records AS t (k, content_type, doc, rev) SELECT * FROM unnest($1::bytea[], $2::text[], $3::bytea[], $4::bytea[])
ON CONFLICT (k) DO UPDATE SET content_type = EXCLUDED.content_type, doc = EXCLUDED.doc, rev = EXCLUDED.rev`

func (e *benchEnv) rawPut(b *testing.B, keys [][]byte, cts []string, docs, revs [][]byte) {
	if _, err := e.pool.Exec(context.Background(), rawUpsert, keys, cts, docs, revs); err != nil {
		b.Fatal(err)
	}
}

// positions maps each key to its position in the request: what a caller
// needs to answer per request key from rows that come in any order, built
// for each request (its keys are new each time).
func positions(keys [][]byte) map[string]int {
	m := make(map[string]int, len(keys))
	for i, k := range keys {
		m[string(k)] = i
	}
	return m
}

// rawRows runs query, scans each row into dest and calls row; it fails
// unless there was a row for each of the env's keys.
func (e *benchEnv) rawRows(b *testing.B, dest []any, row func(), query string, args ...any) {
	rows, err := e.pool.Query(context.Background(), query, args...)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			b.Fatal(err)
		}
		row()
		n++
	}
	rows.Close()
	if rows.Err() != nil || n != len(e.keys) {
		b.Fatal(rows.Err(), n)
	}
}

// paired runs the cases alternately in one loop, the order rotating every
// iteration, timing each call, and reports each case's p50 and p99 and
// the ratio of the first case's to each other's: the machine's noise hits
// all cases alike, so the ratios hold where the absolute times do not
// (ns/op is the time of one call of every case).
func paired(b *testing.B, cases ...pairedCase) {
	times := make([][]time.Duration, len(cases))
	n := 0
	for b.Loop() {
		for x := range cases {
			c := (n + x) % len(cases)
			t0 := time.Now()
			cases[c].run(b)
			times[c] = append(times[c], time.Since(t0))
		}
		n++
	}
	if n == 0 {
		return
	}
	for c, pc := range cases {
		b.ReportMetric(pQuantile(times[c], 0.5)/1e3, pc.name+"-p50-µs")
		b.ReportMetric(pQuantile(times[c], 0.99)/1e3, pc.name+"-p99-µs")
		if c > 0 {
			b.ReportMetric(pQuantile(times[0], 0.5)/pQuantile(times[c], 0.5), cases[0].name+"/"+pc.name+"-p50")
			b.ReportMetric(pQuantile(times[0], 0.99)/pQuantile(times[c], 0.99), cases[0].name+"/"+pc.name+"-p99")
		}
	}
}

func pQuantile(ts []time.Duration, q float64) float64 {
	s := slices.Clone(ts)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(q*float64(len(s))))])
}

type pairedCase struct {
	name string
	run  func(b *testing.B)
}

// BenchmarkBatchPut500x1KB: unconditional puts of 500 × 1 KB. The port
// answers for each put whether the record existed, so raw pgx's statement
// returns that too (RETURNING k, xmax <> 0, matched to the input by key).
func BenchmarkBatchPut500x1KB(b *testing.B) {
	e := newBenchEnv(b, 500)
	ctx := context.Background()
	existed := make([]bool, len(e.keys))
	paired(b,
		pairedCase{"adapter", func(b *testing.B) {
			for _, r := range e.s.Write(ctx, e.ops) {
				if r.Err != nil || !r.Existed {
					b.Fatal(r.Err)
				}
			}
		}},
		pairedCase{"raw", func(b *testing.B) {
			var k []byte
			var ex bool
			idx := positions(e.keys)
			e.rawRows(b, []any{&k, &ex}, func() { existed[idx[string(k)]] = ex }, rawUpsert+" RETURNING t.k, t.xmax <> 0", e.keys, e.cts, e.docs, e.revs)
		}},
	)
}

// BenchmarkBatchRead500: 500 records by key. Raw pgx keeps what it read
// in the order asked for (the port answers per address), as the adapter
// must, mapping the request's keys to their positions for each request
// ("raw"); "raw-premapped" reuses one map built before the loop, as if
// every request asked for the same keys (the figure before the raw side
// was made to do that work).
func BenchmarkBatchRead500(b *testing.B) {
	e := newBenchEnv(b, 500)
	ctx := context.Background()
	type rec struct {
		ct             string
		doc, rev, mark []byte
	}
	read := func(idx map[string]int) {
		out := make([]rec, len(e.keys))
		var k []byte
		var r rec
		e.rawRows(b, []any{&k, &r.ct, &r.doc, &r.rev, &r.mark}, func() { out[idx[string(k)]] = r }, "SELECT k, content_type, doc, rev, mark FROM raw.records WHERE k = ANY($1)", e.keys)
	}
	premapped := positions(e.keys)
	paired(b,
		pairedCase{"adapter", func(b *testing.B) {
			for _, r := range e.s.Read(ctx, e.adds) {
				if !r.Found {
					b.Fatal("not found")
				}
			}
		}},
		pairedCase{"raw", func(b *testing.B) { read(positions(e.keys)) }},
		pairedCase{"raw-premapped", func(b *testing.B) { read(premapped) }},
	)
}

// BenchmarkSinglePut: one unconditional put. "raw" is raw pgx doing what
// the port asks (the same statement, returning whether the row existed);
// "raw-exec" is the same upsert without that answer (the figure before
// the raw side was made to do the same work).
func BenchmarkSinglePut(b *testing.B) {
	e := newBenchEnv(b, 1)
	ctx := context.Background()
	const upsert = `INSERT INTO raw.records AS t (k, content_type, doc, rev) VALUES ($1, $2, $3, $4)
ON CONFLICT (k) DO UPDATE SET content_type = EXCLUDED.content_type, doc = EXCLUDED.doc, rev = EXCLUDED.rev`
	paired(b,
		pairedCase{"adapter", func(b *testing.B) {
			if r := e.s.Write(ctx, e.ops[:1]); r[0].Err != nil || !r[0].Existed {
				b.Fatal(r[0].Err)
			}
		}},
		pairedCase{"raw", func(b *testing.B) {
			var existed bool
			if err := e.pool.QueryRow(ctx, upsert+" RETURNING t.xmax <> 0", e.keys[0], e.cts[0], e.docs[0], e.revs[0]).Scan(&existed); err != nil || !existed {
				b.Fatal(err)
			}
		}},
		pairedCase{"raw-exec", func(b *testing.B) {
			if _, err := e.pool.Exec(ctx, upsert, e.keys[0], e.cts[0], e.docs[0], e.revs[0]); err != nil {
				b.Fatal(err)
			}
		}},
	)
}

// BenchmarkSingleMerge: a read and a write conditioned on its revision.
func BenchmarkSingleMerge(b *testing.B) {
	e := newBenchEnv(b, 1)
	ctx := context.Background()
	n := 0
	paired(b,
		pairedCase{"adapter", func(b *testing.B) {
			r := e.s.Read(ctx, e.adds[:1])[0]
			op := e.ops[0]
			op.Condition = ports.Condition{Kind: ports.ConditionRevision, Revision: r.Record.Revision}
			if w := e.s.Write(ctx, []ports.WriteOp{op}); w[0].Err != nil {
				b.Fatal(w[0].Err)
			}
		}},
		pairedCase{"raw", func(b *testing.B) {
			// The same work: read the record (document, revision, mark),
			// write the new document conditioned on the revision.
			var ct string
			var doc, rev, mark []byte
			if err := e.pool.QueryRow(ctx, "SELECT content_type, doc, rev, mark FROM raw.records WHERE k = $1", e.keys[0]).Scan(&ct, &doc, &rev, &mark); err != nil {
				b.Fatal(err)
			}
			n++
			next := []byte(fmt.Sprintf("%016d", n))
			tag, err := e.pool.Exec(ctx, "UPDATE raw.records SET content_type = $2, doc = $3, rev = $4 WHERE k = $1 AND rev = $5", e.keys[0], ct, e.docs[0], next, rev)
			if err != nil || tag.RowsAffected() != 1 {
				b.Fatal(err, tag)
			}
		}},
	)
}

// BenchmarkJSONBCopy measures what a jsonb copy of each JSON document
// beside its exact bytes would cost a batch put of 500 × 1 KB (raw pgx,
// the adapter's table shape with and without a doc_json jsonb column
// filled from the bytes in the same statement): the decision recorded in
// docs/postgres.md.
func BenchmarkJSONBCopy(b *testing.B) {
	e := newBenchEnv(b, 500)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `CREATE TABLE raw.records_jsonb (k bytea PRIMARY KEY, content_type text NOT NULL, doc bytea NOT NULL, doc_json jsonb, rev bytea NOT NULL, mark bytea)`); err != nil {
		b.Fatal(err)
	}
	const withCopy = `INSERT INTO raw.records_jsonb AS t (k, content_type, doc, doc_json, rev)
SELECT k, ct, doc, convert_from(doc, 'UTF8')::jsonb, rev FROM unnest($1::bytea[], $2::text[], $3::bytea[], $4::bytea[]) AS u(k, ct, doc, rev)
ON CONFLICT (k) DO UPDATE SET content_type = EXCLUDED.content_type, doc = EXCLUDED.doc, doc_json = EXCLUDED.doc_json, rev = EXCLUDED.rev`
	b.Run("bytes only", func(b *testing.B) {
		for b.Loop() {
			e.rawPut(b, e.keys, e.cts, e.docs, e.revs)
		}
	})
	b.Run("bytes and jsonb", func(b *testing.B) {
		for b.Loop() {
			if _, err := e.pool.Exec(ctx, withCopy, e.keys, e.cts, e.docs, e.revs); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkMergeContention: 16 clients merging through the application
// (counting profile) into one hot record, or spread over 100 records
// (mergebench.Run, which the MongoDB adapter's benchmark runs too).
func BenchmarkMergeContention(b *testing.B) {
	for _, keys := range []int{1, 100} {
		b.Run(mergebench.Name(keys), func(b *testing.B) {
			p, _ := newPool(b, 16)
			mergebench.Run(b, newStore(b, p, postgres.Options{}), "bench", "hot", keys, domain.ContentTypeJSON)
		})
	}
}

// BenchmarkAdapterAllocs: the adapter alone, for its allocations per call
// (the paired benchmarks' allocs/op count every case of the loop).
func BenchmarkAdapterAllocs(b *testing.B) {
	e := newBenchEnv(b, 500)
	ctx := context.Background()
	b.Run("single put", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r := e.s.Write(ctx, e.ops[:1]); r[0].Err != nil {
				b.Fatal(r[0].Err)
			}
		}
	})
	b.Run("batch read 500", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r := e.s.Read(ctx, e.adds); !r[0].Found {
				b.Fatal("not found")
			}
		}
	})
}
