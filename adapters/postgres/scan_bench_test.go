package postgres_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sink-io/sink/adapters/postgres"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/scanbench"
	"github.com/sink-io/sink/ports"
)

// Scan and count benchmarks: Sink (the application's use cases over the
// adapter, pages of 1,000) against raw pgx reading the same records of the
// same table in the same order, on the same server, one run, interleaved.
// SINK_BENCH_SCAN_RECORDS sets the number of 1 KB JSON records (default
// 100,000); numbers in docs/query.md:
//
//	go test ./adapters/postgres/ -run '^$' -bench 'BenchmarkScan$' -benchtime 10x -count 6
//	go test ./adapters/postgres/ -run '^$' -bench 'BenchmarkCount$|BenchmarkSelectiveFilter' -benchtime 3x -count 6

type pgScanBench struct {
	ctx context.Context
	svc *application.Service
	// paged is the service over the store without its streams (a query
	// per read, with the application's read-ahead: before streams).
	paged   *application.Service
	pool    *pgxpool.Pool
	dataset domain.DatasetRef
	table   string
	n       int
}

func newPGScanBench(b *testing.B) *pgScanBench {
	b.Helper()
	n := scanbench.Records(b)
	p, _ := newPool(b, 8)
	s := newStore(b, p, postgres.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	b.Cleanup(cancel)
	d := domain.DatasetRef{Store: "primary", Namespace: "bench", Dataset: "scan"}
	var ops []ports.WriteOp
	for i := range n {
		ops = append(ops, ports.WriteOp{Kind: ports.WritePut, Address: domain.Address{Store: d.Store, Namespace: d.Namespace, Dataset: d.Dataset, Key: domain.Int64Key(int64(i))},
			Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: scanbench.JSONDoc(i)}})
	}
	putAll(b, ctx, s, ops)
	if _, err := p.Exec(ctx, `VACUUM ANALYZE bench.scan`); err != nil {
		b.Fatal(err)
	}
	svc, err := application.NewService(application.DefaultConfig(), s, nil, application.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	paged, err := application.NewService(application.DefaultConfig(), noStreams{s, s}, nil, application.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	return &pgScanBench{ctx: ctx, svc: svc, paged: paged, pool: p, dataset: d, table: "bench.scan", n: n}
}

// noStreams is a storage and scanner without ports.ScanStreamer.
type noStreams struct {
	ports.Storage
	ports.Scanner
}

// rawCount runs a count statement.
func (e *pgScanBench) rawCount(b *testing.B, sql string) int {
	var n int
	if err := e.pool.QueryRow(e.ctx, sql).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkScan: a whole scan, Sink and raw pgx alternating in every
// iteration. sink reads through the adapter's stream (one SELECT per key
// kind for the whole call); sink-paged through its Scanner alone (a query
// per read and the application's read-ahead, as before streams). raw reads
// the same rows (key, content type, document, revision) in key order with
// one streaming SELECT; raw-paged reads them in pages of 1,000 by key
// (WHERE k > last ORDER BY k LIMIT 1000). sink/raw above 1 means Sink is
// faster.
func BenchmarkScan(b *testing.B) {
	e := newPGScanBench(b)
	read := func(rows pgx.Rows, last *[]byte) int {
		var k, doc, rev []byte
		var ct string
		n := 0
		_, err := pgx.ForEachRow(rows, []any{&k, &ct, &doc, &rev}, func() error { n++; return nil })
		if err != nil {
			b.Fatal(err)
		}
		*last = k
		return n
	}
	b.Run("alternating", func(b *testing.B) {
		scanbench.Alternate(b, e.n,
			scanbench.Case{Name: "sink", Want: e.n, Run: func() int { return scanbench.Scan(e.ctx, b, e.svc, domain.ScanSpec{Dataset: e.dataset}) }},
			scanbench.Case{Name: "sink-paged", Want: e.n, Run: func() int { return scanbench.Scan(e.ctx, b, e.paged, domain.ScanSpec{Dataset: e.dataset}) }},
			scanbench.Case{Name: "raw", Want: e.n, Run: func() int {
				rows, err := e.pool.Query(e.ctx, `SELECT k, content_type, doc, rev FROM bench.scan ORDER BY k`)
				if err != nil {
					b.Fatal(err)
				}
				var last []byte
				return read(rows, &last)
			}},
			scanbench.Case{Name: "raw-paged", Want: e.n, Run: func() int {
				total := 0
				last := []byte{}
				for {
					rows, err := e.pool.Query(e.ctx, `SELECT k, content_type, doc, rev FROM bench.scan WHERE k > $1 ORDER BY k LIMIT 1000`, last)
					if err != nil {
						b.Fatal(err)
					}
					n := read(rows, &last)
					total += n
					if n < 1000 {
						return total
					}
				}
			}})
	})
}

// BenchmarkCount: a count without a filter (SELECT count(*) either way),
// and with one (n < 100): Sink scans and evaluates it, raw SQL parses every
// document on the server (convert_from(doc, 'UTF8')::jsonb), which is the
// most a pushdown of the filter could save.
func BenchmarkCount(b *testing.B) {
	e := newPGScanBench(b)
	lt100 := &domain.Filter{Op: domain.FilterLt, Path: []string{"n"}, Value: domain.IntValue(100)}
	b.Run("all", func(b *testing.B) {
		scanbench.Alternate(b, e.n,
			scanbench.Case{Name: "sink", Want: e.n, Run: func() int { return int(scanbench.Count(e.ctx, b, e.svc, domain.ScanSpec{Dataset: e.dataset})) }},
			scanbench.Case{Name: "raw", Want: e.n, Run: func() int { return e.rawCount(b, `SELECT count(*) FROM bench.scan`) }})
	})
	b.Run("filter", func(b *testing.B) {
		want := min(e.n, 100)
		scanbench.Alternate(b, e.n,
			scanbench.Case{Name: "sink", Want: want, Run: func() int {
				return int(scanbench.Count(e.ctx, b, e.svc, domain.ScanSpec{Dataset: e.dataset, Filter: lt100}))
			}},
			scanbench.Case{Name: "raw", Want: want, Run: func() int {
				return e.rawCount(b, `SELECT count(*) FROM bench.scan WHERE (convert_from(doc, 'UTF8')::jsonb -> 'n') < '100'::jsonb`)
			}})
	})
}

// BenchmarkSelectiveFilter: a filter one record matches (n == 4242) as a
// Sink scan and as raw SQL, without and then with an expression index on
// the field (through an IMMUTABLE wrapper: convert_from is only STABLE).
// Sink evaluates filters itself, so the index leaves its time unchanged.
func BenchmarkSelectiveFilter(b *testing.B) {
	e := newPGScanBench(b)
	target := min(4242, e.n-1)
	f := &domain.Filter{Op: domain.FilterEq, Path: []string{"n"}, Value: domain.IntValue(int64(target))}
	if _, err := e.pool.Exec(e.ctx, `CREATE FUNCTION bench.json_doc(bytea) RETURNS jsonb IMMUTABLE STRICT PARALLEL SAFE LANGUAGE sql AS $$ SELECT convert_from($1, 'UTF8')::jsonb $$`); err != nil {
		b.Fatal(err)
	}
	cases := []scanbench.Case{
		{Name: "sink", Want: 1, Run: func() int { return scanbench.Scan(e.ctx, b, e.svc, domain.ScanSpec{Dataset: e.dataset, Filter: f}) }},
		{Name: "raw", Want: 1, Run: func() int {
			return e.rawCount(b, `SELECT count(*) FROM bench.scan WHERE bench.json_doc(doc) -> 'n' = '`+strconv.Itoa(target)+`'::jsonb`)
		}},
	}
	b.Run("no-index", func(b *testing.B) { scanbench.Alternate(b, e.n, cases...) })
	if _, err := e.pool.Exec(e.ctx, `CREATE INDEX scan_n ON bench.scan ((bench.json_doc(doc) -> 'n')); ANALYZE bench.scan`); err != nil {
		b.Fatal(err)
	}
	b.Run("index", func(b *testing.B) { scanbench.Alternate(b, e.n, cases...) })
}
