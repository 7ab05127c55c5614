package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/adapters/postgres"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/pgtest"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
)

var scanNamespaces atomic.Int64

func freshNamespace(testing.TB) string { return fmt.Sprintf("scan%d", scanNamespaces.Add(1)) }

func TestScanConformance(t *testing.T) {
	for _, enc := range []struct {
		name   string
		encode func(testing.TB, domain.Value) domain.Document
		params string
	}{
		{"JSON", storagetest.EncodeJSON, ""}, {"BSON", storagetest.EncodeBSON, ""},
		// Every column as text: rows are read through Scan, not raw.
		{"SimpleProtocol", storagetest.EncodeJSON, "default_query_exec_mode=simple_protocol"},
	} {
		t.Run(enc.name, func(t *testing.T) {
			url := pgtest.Shared(t).NewDatabase(t)
			if enc.params != "" {
				url += map[bool]string{true: "&", false: "?"}[strings.Contains(url, "?")] + enc.params
			}
			p := poolFor(t, url, 8)
			storagetest.RunScan(t, storagetest.ScanFixtures{
				NewStorage: func(t *testing.T) ports.Storage { return newStore(t, p, postgres.Options{}) },
				Store:      "primary",
				Namespace:  freshNamespace,
				Encode:     enc.encode,
			})
		})
	}
}

// newDifferential compares PostgreSQL (JSON documents in Sink's tables)
// with the memory reference.
func newDifferential(t testing.TB) *storagetest.Differential {
	p, _ := newPool(t, 4)
	return &storagetest.Differential{Reference: memory.New(), Subject: newStore(t, p, postgres.Options{}),
		Store: "primary", RefNamespace: "ref", Namespace: "diff", Encode: storagetest.EncodeJSON}
}

// TestScanDifferential: random documents × random filters × random ranges,
// orders and page sizes scan alike on PostgreSQL and on the memory
// reference (MongoDB's adapter has the same test, so the three agree).
func TestScanDifferential(t *testing.T) {
	d := newDifferential(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if n := d.Run(ctx, t, 42, 5, 60, 400); n != 2000 {
		t.Fatalf("compared %d cases", n)
	}
	// BSON documents in the same tables.
	d.Encode, d.Namespace = storagetest.EncodeBSON, "diffbson"
	if n := d.Run(ctx, t, 43, 2, 60, 100); n != 200 {
		t.Fatalf("compared %d BSON cases", n)
	}
}

// FuzzScanDifferential runs the differential test from fuzzed seeds
// (make fuzz).
func FuzzScanDifferential(f *testing.F) {
	f.Add(uint64(1))
	f.Add(uint64(99))
	f.Fuzz(func(t *testing.T, seed uint64) {
		newDifferential(t).Run(t.Context(), t, seed, 1, 30, 40)
	})
}

// TestScanLegacyTables: rows that psql inserted into bound tables of each
// key column type are scanned in the key order (text by bytes whatever
// the column's collation; uuid and bytea as bytes keys: length, then
// bytes), with ranges and every page size, with a query per read and
// through a stream, beside records Sink wrote;
// Sink's meta column never shows, and documents and revisions are what
// Read returns.
func TestScanLegacyTables(t *testing.T) {
	p, url := newPool(t, 4)
	// A linguistic collation, which orders text unlike bytes, when the
	// server has one.
	textType := "text"
	if pgtest.PSQL(t, url, `SELECT count(*) FROM pg_collation WHERE collname = 'und-x-icu'`) == "1" {
		textType = `text COLLATE "und-x-icu"`
	}
	uuidKey := func(b byte) domain.Key { k := make([]byte, 16); k[0], k[15] = b, 1; return domain.BytesKey(k) }
	cases := []struct {
		keyType, colType, docType string
		sqlKeys                   []string // as psql writes them
		keys                      []domain.Key
		sinkKey                   domain.Key // a record Sink writes
		bounds                    []domain.Key
	}{
		{postgres.KeyTypeBigint, "bigint", postgres.DocTypeJSONB, []string{"7", "-3", "0", "9223372036854775807", "-9223372036854775808", "100"},
			[]domain.Key{domain.Int64Key(7), domain.Int64Key(-3), domain.Int64Key(0), domain.Int64Key(1<<63 - 1), domain.Int64Key(-1 << 63), domain.Int64Key(100)},
			domain.Int64Key(50), []domain.Key{domain.Int64Key(0), domain.Int64Key(8), domain.StringKey("a")}},
		{postgres.KeyTypeText, textType, postgres.DocTypeJSON, []string{"'b'", "'a'", "'ab'", "'Z'", "'é'", "'e' || U&'\\0301'", "'a b'", "'~'", "'B'"},
			[]domain.Key{domain.StringKey("b"), domain.StringKey("a"), domain.StringKey("ab"), domain.StringKey("Z"), domain.StringKey("é"), domain.StringKey("e\u0301"), domain.StringKey("a b"), domain.StringKey("~"), domain.StringKey("B")},
			domain.StringKey("aa"), []domain.Key{domain.StringKey("a"), domain.StringKey("a\x00z"), domain.StringKey("e"), domain.Int64Key(1), domain.BytesKey(nil)}},
		{postgres.KeyTypeUUID, "uuid", postgres.DocTypeText, []string{"'ff000000-0000-0000-0000-000000000001'", "'01000000-0000-0000-0000-000000000001'", "'80000000-0000-0000-0000-000000000001'"},
			[]domain.Key{uuidKey(0xff), uuidKey(1), uuidKey(0x80)},
			uuidKey(0x40), []domain.Key{uuidKey(0x80), domain.BytesKey([]byte{0xff}), domain.BytesKey(make([]byte, 17))}},
		{postgres.KeyTypeBytea, "bytea", postgres.DocTypeBytea, []string{`'\xff'`, `'\x0001'`, `'\x000000'`, `'\x7f'`, `'\x'`, `'\x01'`},
			[]domain.Key{domain.BytesKey([]byte{0xff}), domain.BytesKey([]byte{0, 1}), domain.BytesKey([]byte{0, 0, 0}), domain.BytesKey([]byte{0x7f}), domain.BytesKey(nil), domain.BytesKey([]byte{1})},
			domain.BytesKey([]byte{0x80, 0}), []domain.Key{domain.BytesKey([]byte{0x7f}), domain.BytesKey([]byte{0, 0}), domain.StringKey("z")}},
	}
	for i, c := range cases {
		t.Run(c.keyType, func(t *testing.T) {
			ctx := ctxT(t)
			table := fmt.Sprintf("legacy%d", i)
			pgtest.PSQL(t, url, `CREATE TABLE `+table+` (id `+c.colType+` PRIMARY KEY, body `+c.docType+` NOT NULL)`)
			for j, k := range c.sqlKeys {
				doc := fmt.Sprintf(`'{"i": %d}'`, j)
				if c.docType == postgres.DocTypeBytea {
					doc = "convert_to(" + doc + ", 'UTF8')"
				}
				pgtest.PSQL(t, url, `INSERT INTO `+table+` VALUES (`+k+`, `+doc+`)`)
			}
			ct := domain.ContentTypeJSON
			if c.docType == postgres.DocTypeText || c.docType == postgres.DocTypeBytea {
				ct = "application/x-ndjson"
			}
			s := newStore(t, p, postgres.Options{Bindings: []postgres.Binding{{Namespace: "shop", Dataset: table, Schema: "public", Table: table,
				KeyColumn: "id", KeyType: c.keyType, DocumentColumn: "body", DocumentType: c.docType, ContentType: ct}}})
			d := domain.DatasetRef{Store: "primary", Namespace: "shop", Dataset: table}
			sa := domain.Address{Store: d.Store, Namespace: d.Namespace, Dataset: d.Dataset, Key: c.sinkKey}
			if r := s.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: sa, Document: domain.Document{ContentType: ct, Data: []byte(`{"sink":1}`)}}})[0]; r.Err != nil {
				t.Fatal(r.Err)
			}
			all := append(slices.Clone(c.keys), c.sinkKey)
			addrs := make([]domain.Address, len(all))
			for j, k := range all {
				addrs[j] = domain.Address{Store: d.Store, Namespace: d.Namespace, Dataset: d.Dataset, Key: k}
			}
			byKey := map[string]domain.Record{}
			for j, r := range s.Read(ctx, addrs) {
				if r.Err != nil || !r.Found {
					t.Fatalf("read %v: %+v", all[j], r)
				}
				byKey[all[j].String()] = r.Record
			}
			var ranges []domain.KeyRange
			ranges = append(ranges, domain.KeyRange{})
			for j, b := range c.bounds {
				ranges = append(ranges, domain.KeyRange{Start: &domain.KeyBound{Key: b, Inclusive: j%2 == 0}},
					domain.KeyRange{End: &domain.KeyBound{Key: b, Inclusive: j%2 == 1}},
					domain.KeyRange{Start: &domain.KeyBound{Key: c.bounds[0], Inclusive: true}, End: &domain.KeyBound{Key: b}})
			}
			for _, pre := range []string{"a", "", "e", "\x00"} {
				ranges = append(ranges, domain.KeyRange{Prefix: &pre})
			}
			for _, r := range ranges {
				for _, desc := range []bool{false, true} {
					var want []domain.Key
					for _, k := range storagetest.SortedKeys(all, desc) {
						if r.Contains(k) {
							want = append(want, k)
						}
					}
					for limit := 1; limit <= 2*(len(all)+1); limit++ {
						// Every page size with a query per read, then through a stream.
						q := ports.ScanQuery{Dataset: d, Range: r, Descending: desc, Limit: (limit-1)%(len(all)+1) + 1}
						var keys []domain.Key
						var docs []domain.Document
						if limit <= len(all)+1 {
							keys, docs = storagetest.ScanAll(ctx, t, s, q, nil)
						} else {
							keys, docs = storagetest.ScanAllStream(ctx, t, s, q, nil)
						}
						if !slices.EqualFunc(keys, want, domain.Key.Equal) {
							t.Fatalf("range %+v descending %v page %d (stream %v): keys %v, want %v", r, desc, q.Limit, limit > len(all)+1, keys, want)
						}
						for j, k := range keys {
							if rec := byKey[k.String()]; string(docs[j].Data) != string(rec.Document.Data) || docs[j].ContentType != rec.Document.ContentType {
								t.Fatalf("key %v: scanned %q (%s), read %q (%s)", k, docs[j].Data, docs[j].ContentType, rec.Document.Data, rec.Document.ContentType)
							}
						}
					}
					n, err := s.Count(ctx, ports.CountQuery{Dataset: d, Range: r})
					if err != nil || !n.Exact || n.Count != int64(len(want)) {
						t.Fatalf("count of range %+v = %+v, %v; want %d", r, n, err, len(want))
					}
				}
			}
			// Revisions as Read gives them; the meta column never shows.
			res, err := s.Scan(ctx, ports.ScanQuery{Dataset: d, Limit: 100})
			if err != nil || !res.Done || len(res.Items) != len(all) {
				t.Fatalf("scan: %+v, %v", res, err)
			}
			for _, it := range res.Items {
				if it.Record.Revision != byKey[it.Key.String()].Revision || strings.Contains(string(it.Record.Document.Data), "sink_meta") {
					t.Fatalf("record %v: %+v, read %+v", it.Key, it.Record, byKey[it.Key.String()])
				}
			}
		})
	}
}

// putAll writes ops in batches of 500.
func putAll(t testing.TB, ctx context.Context, s *postgres.Store, ops []ports.WriteOp) {
	t.Helper()
	for i := 0; i < len(ops); i += 500 {
		chunk := ops[i:min(i+500, len(ops))]
		for j, r := range s.Write(ctx, chunk) {
			if r.Err != nil {
				t.Fatalf("put %v: %v", chunk[j].Address, r.Err)
			}
		}
	}
}

// TestScanUsesIndexes: on a table Sink created, the statement of every key
// kind, with a range and a resume key, in both directions, is served by an
// index in key order: with sorts, bitmap and sequential scans
// discouraged, its plan has no Sort (the planner may still sort a small
// result rather than walk an index; what matters is that it need not).
func TestScanUsesIndexes(t *testing.T) {
	p, _ := newPool(t, 2)
	s := newStore(t, p, postgres.Options{})
	ctx := ctxT(t)
	d := domain.DatasetRef{Store: "primary", Namespace: "plans", Dataset: "d"}
	var ops []ports.WriteOp
	for i := range 4000 {
		var k domain.Key
		switch i % 4 {
		case 0:
			k = domain.Int64Key(int64(i))
		case 1:
			k = domain.StringKey(fmt.Sprintf("s%05d", i))
		case 2:
			k = domain.BytesKey([]byte(fmt.Sprintf("b%d", i)))
		default:
			k = domain.ObjectIDKey([]byte(fmt.Sprintf("o%011d", i)))
		}
		ops = append(ops, ports.WriteOp{Kind: ports.WritePut, Address: domain.Address{Store: d.Store, Namespace: d.Namespace, Dataset: d.Dataset, Key: k},
			Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"x":1}`)}})
	}
	putAll(t, ctx, s, ops)
	if _, err := p.Exec(ctx, `ANALYZE plans.d`); err != nil {
		t.Fatal(err)
	}
	conn, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET enable_sort = off; SET enable_bitmapscan = off; SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	after := []domain.Key{domain.Int64Key(100), domain.StringKey("s00100"), domain.BytesKey([]byte("b1000")), domain.ObjectIDKey([]byte("o00000001000"))}
	for _, desc := range []bool{false, true} {
		for _, a := range after {
			prefix := "s0"
			for _, r := range []domain.KeyRange{{}, {Start: &domain.KeyBound{Key: domain.Int64Key(-5)}, End: &domain.KeyBound{Key: domain.ObjectIDKey([]byte("o99999999999")), Inclusive: true}}, {Prefix: &prefix}} {
				if !r.Contains(a) {
					continue
				}
				sqls, argss, err := postgres.ScanStatements(s, ports.ScanQuery{Dataset: d, Range: r, After: &a, Descending: desc, Limit: 100})
				if err != nil {
					t.Fatal(err)
				}
				for i, q := range sqls {
					rows, err := conn.Query(ctx, "EXPLAIN "+q, argss[i]...)
					if err != nil {
						t.Fatalf("%s: %v", q, err)
					}
					var plan []string
					for rows.Next() {
						var line string
						if err := rows.Scan(&line); err != nil {
							t.Fatal(err)
						}
						plan = append(plan, line)
					}
					if rows.Err() != nil {
						t.Fatal(rows.Err())
					}
					text := strings.Join(plan, "\n")
					if strings.Contains(text, "Sort") || !strings.Contains(text, "Index") {
						t.Fatalf("statement %s\nwith %v is not served by an index in key order:\n%s", q, argss[i], text)
					}
				}
			}
		}
	}
}

// TestScanDifferentialBoundTables: the differential test over bound tables
// created by SQL — string keys in a text column with a linguistic
// collation where the server has one (scanned by bytes all the same) and
// JSON documents in a json column, int64 keys and jsonb documents
// (normalised by PostgreSQL, so records are compared by value).
func TestScanDifferentialBoundTables(t *testing.T) {
	p, url := newPool(t, 4)
	textType := "text"
	if pgtest.PSQL(t, url, `SELECT count(*) FROM pg_collation WHERE collname = 'und-x-icu'`) == "1" {
		textType = `text COLLATE "und-x-icu"`
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	for _, c := range []struct {
		keyType, column, docType string
		kind                     domain.KeyKind
		seed                     uint64
	}{
		{postgres.KeyTypeText, textType, postgres.DocTypeJSON, domain.KeyString, 7},
		{postgres.KeyTypeBigint, "bigint", postgres.DocTypeJSONB, domain.KeyInt64, 8},
	} {
		t.Run(c.keyType, func(t *testing.T) {
			// The differential writes datasets diff<seed>_<round>.
			var bindings []postgres.Binding
			for round := range 2 {
				table := fmt.Sprintf("diff%d_%d", c.seed, round)
				pgtest.PSQL(t, url, `CREATE TABLE public.`+table+` (id `+c.column+` PRIMARY KEY, body `+c.docType+` NOT NULL)`)
				bindings = append(bindings, postgres.Binding{Namespace: "bound", Dataset: table, Schema: "public", Table: table,
					KeyColumn: "id", KeyType: c.keyType, DocumentColumn: "body", DocumentType: c.docType})
			}
			d := storagetest.Differential{Reference: memory.New(), Subject: newStore(t, p, postgres.Options{Bindings: bindings}),
				Store: "primary", RefNamespace: "ref", Namespace: "bound", Encode: storagetest.EncodeJSON,
				SubjectEncode: storagetest.EncodeJSON, KeyKinds: []domain.KeyKind{c.kind}}
			if n := d.Run(ctx, t, c.seed, 2, 60, 150); n != 300 {
				t.Fatalf("compared %d cases", n)
			}
		})
	}
}

// TestCountEstimate: an estimate of a whole dataset is PostgreSQL's row
// estimate (not exact) once the table was analyzed, and an exact count
// before.
func TestCountEstimate(t *testing.T) {
	p, _ := newPool(t, 2)
	s := newStore(t, p, postgres.Options{})
	ctx := ctxT(t)
	d := domain.DatasetRef{Store: "primary", Namespace: "est", Dataset: "d"}
	var ops []ports.WriteOp
	for i := range 50 {
		ops = append(ops, ports.WriteOp{Kind: ports.WritePut, Address: domain.Address{Store: d.Store, Namespace: d.Namespace, Dataset: d.Dataset, Key: domain.Int64Key(int64(i))},
			Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{}`)}})
	}
	putAll(t, ctx, s, ops)
	if c, err := s.Count(ctx, ports.CountQuery{Dataset: d, Estimate: true}); err != nil || !c.Exact || c.Count != 50 {
		t.Fatalf("estimate before ANALYZE: %+v, %v; want an exact 50", c, err)
	}
	if _, err := p.Exec(ctx, `ANALYZE est.d`); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Count(ctx, ports.CountQuery{Dataset: d, Estimate: true}); err != nil || c.Exact || c.Count != 50 {
		t.Fatalf("estimate after ANALYZE: %+v, %v; want an estimate of 50", c, err)
	}
	start := domain.Int64Key(10)
	if c, err := s.Count(ctx, ports.CountQuery{Dataset: d, Estimate: true, Range: domain.KeyRange{Start: &domain.KeyBound{Key: start, Inclusive: true}}}); err != nil || !c.Exact || c.Count != 40 {
		t.Fatalf("estimate of a range: %+v, %v; want an exact 40", c, err)
	}
}
