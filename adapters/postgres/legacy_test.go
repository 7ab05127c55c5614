package postgres_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/sink-io/sink/adapters/postgres"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/countprofile"
	"github.com/sink-io/sink/internal/testkit/pgtest"
	"github.com/sink-io/sink/ports"
)

// columns lists a table's columns and their types, in order.
func columns(t *testing.T, url, table string) string {
	return pgtest.PSQL(t, url, "SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum) FROM pg_attribute WHERE attrelid = '"+table+"'::regclass AND attnum > 0 AND NOT attisdropped")
}

// Legacy tables: rows written by psql are read, put and deleted through
// the store; the table keeps its shape (Sink adds only its meta column),
// the other columns keep their values, and a change by another program
// changes the revision.
func TestLegacyTables(t *testing.T) {
	uuid := []byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}
	cases := []struct {
		keyType, docType string
		key, newKey      domain.Key
		sqlKey, sqlDoc   string // as psql writes them
		read             string // the document as PostgreSQL returns it
		put              string
		putStored        string // the put document as PostgreSQL returns it
		contentType      string
	}{
		{postgres.KeyTypeBigint, postgres.DocTypeJSONB, domain.Int64Key(42), domain.Int64Key(-7), "42", `'{"b": [1,2],   "a": 1}'`,
			`{"a": 1, "b": [1, 2]}`, `{"z":1,  "a":"x"}`, `{"a": "x", "z": 1}`, ""},
		{postgres.KeyTypeText, postgres.DocTypeJSON, domain.StringKey("ord-1"), domain.StringKey("ünï"), "'ord-1'", `'{"b": [1,2],   "a": 1}'`,
			`{"b": [1,2],   "a": 1}`, `{"z":1,  "a":"x"}`, `{"z":1,  "a":"x"}`, ""},
		{postgres.KeyTypeUUID, postgres.DocTypeText, domain.BytesKey(uuid), domain.BytesKey(bytes.Repeat([]byte{7}, 16)), "'12345678-9abc-def0-0123-456789abcdef'", `'plain text'`,
			`plain text`, `other text`, `other text`, "text/plain"},
		{postgres.KeyTypeBytea, postgres.DocTypeBytea, domain.BytesKey([]byte{0, 1, 0xff}), domain.BytesKey([]byte("k")), `'\x0001ff'`, `'\xdeadbeef'`,
			"\xde\xad\xbe\xef", "\x00\x01binary", "\x00\x01binary", "application/octet-stream"},
	}
	for _, c := range cases {
		t.Run(c.keyType+"_"+c.docType, func(t *testing.T) {
			p, url := newPool(t, 4)
			ctx := ctxT(t)
			pgtest.PSQL(t, url, `CREATE SCHEMA legacy; CREATE TABLE legacy."Orders" (id `+c.keyType+` PRIMARY KEY, body `+c.docType+` NOT NULL, placed int NOT NULL DEFAULT 7)`)
			pgtest.PSQL(t, url, `INSERT INTO legacy."Orders" (id, body, placed) VALUES (`+c.sqlKey+`, `+c.sqlDoc+`, 1)`)
			before := columns(t, url, `legacy."Orders"`)
			s := newStore(t, p, postgres.Options{Bindings: []postgres.Binding{{
				Namespace: "shop", Dataset: "orders", Schema: "legacy", Table: "Orders",
				KeyColumn: "id", KeyType: c.keyType, DocumentColumn: "body", DocumentType: c.docType, ContentType: c.contentType,
			}}})
			ct := c.contentType
			if ct == "" {
				ct = domain.ContentTypeJSON
			}
			a := domain.Address{Namespace: "shop", Dataset: "orders", Key: c.key}
			r := s.Read(ctx, []domain.Address{a})[0]
			if r.Err != nil || !r.Found || string(r.Record.Document.Data) != c.read || r.Record.Document.ContentType != ct {
				t.Fatalf("read of the psql row: %+v (%q), want %q", r, r.Record.Document.Data, c.read)
			}
			legacyRev := r.Record.Revision
			// A put conditioned on the legacy revision.
			w := s.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: a, Condition: ports.Condition{Kind: ports.ConditionRevision, Revision: legacyRev},
				Document: domain.Document{ContentType: ct, Data: []byte(c.put)}}})[0]
			if w.Err != nil || !w.Existed {
				t.Fatalf("put: %+v", w)
			}
			after := columns(t, url, `legacy."Orders"`)
			if after != before+", sink_meta bytea" {
				t.Fatalf("table shape changed beyond the meta column:\nbefore %s\nafter  %s", before, after)
			}
			if got := pgtest.PSQL(t, url, `SELECT placed FROM legacy."Orders"`); got != "1" {
				t.Fatalf("another column changed: placed = %s", got)
			}
			r = s.Read(ctx, []domain.Address{a})[0]
			if !r.Found || string(r.Record.Document.Data) != c.putStored || r.Record.Revision != w.Revision {
				t.Fatalf("read after put: %q revision %x, want %q revision %x", r.Record.Document.Data, r.Record.Revision, c.putStored, w.Revision)
			}
			// Another program changes the row: the revision changes, and a
			// write with the old one fails.
			pgtest.PSQL(t, url, `UPDATE legacy."Orders" SET body = `+c.sqlDoc)
			r2 := s.Read(ctx, []domain.Address{a})[0]
			if !r2.Found || r2.Record.Revision == w.Revision || string(r2.Record.Document.Data) != c.read {
				t.Fatalf("read after another program's update: %+v", r2)
			}
			stale := s.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: a, Condition: ports.Condition{Kind: ports.ConditionRevision, Revision: w.Revision},
				Document: domain.Document{ContentType: ct, Data: []byte(c.put)}}})[0]
			if domain.CodeOf(stale.Err) != domain.CodeRevisionMismatch {
				t.Fatalf("write with the revision from before another program's update: %+v", stale)
			}
			// Create, then delete, a record of Sink's.
			b := domain.Address{Namespace: "shop", Dataset: "orders", Key: c.newKey}
			if w := s.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: b, Condition: ports.Condition{Kind: ports.ConditionAbsent},
				Document: domain.Document{ContentType: ct, Data: []byte(c.put)}}})[0]; w.Err != nil || w.Existed {
				t.Fatalf("create: %+v", w)
			}
			if got := pgtest.PSQL(t, url, `SELECT count(*), min(placed) FROM legacy."Orders"`); got != "2|1" {
				t.Fatalf("rows after create: %s (the default of the other column must fill it)", got)
			}
			if w := s.Write(ctx, []ports.WriteOp{{Kind: ports.WriteDelete, Address: b}})[0]; w.Err != nil || !w.Existed {
				t.Fatalf("delete: %+v", w)
			}
			if got := pgtest.PSQL(t, url, `SELECT count(*) FROM legacy."Orders"`); got != "1" {
				t.Fatalf("rows after delete: %s", got)
			}
			// A key of another kind than the column holds.
			wrong := domain.Address{Namespace: "shop", Dataset: "orders", Key: domain.ObjectIDKey(make([]byte, 12))}
			if err := s.Validate(ports.WriteOp{Kind: ports.WriteDelete, Address: wrong}); domain.CodeOf(err) != domain.CodeInvalidArgument {
				t.Fatalf("Validate of a key the column cannot hold: %v", err)
			}
			if rr := s.Read(ctx, []domain.Address{wrong, a}); domain.CodeOf(rr[0].Err) != domain.CodeInvalidArgument || !rr[1].Found {
				t.Fatalf("read of a key the column cannot hold beside a good one: %+v", rr)
			}
		})
	}
}

func TestLegacyBindingChecksTheTable(t *testing.T) {
	p, url := newPool(t, 2)
	pgtest.PSQL(t, url, `CREATE TABLE t (id text PRIMARY KEY, body jsonb)`)
	s := newStore(t, p, postgres.Options{Bindings: []postgres.Binding{{
		Namespace: "n", Dataset: "d", Schema: "public", Table: "t", KeyColumn: "id", KeyType: "bigint", DocumentColumn: "body", DocumentType: "jsonb",
	}}})
	r := s.Read(ctxT(t), []domain.Address{{Namespace: "n", Dataset: "d", Key: domain.Int64Key(1)}})[0]
	if r.Err == nil || !strings.Contains(r.Err.Error(), `column "id" of table public.t is text, but SINK_POSTGRES_BINDINGS says bigint`) {
		t.Fatalf("binding with the wrong key type: %+v", r)
	}
	s = newStore(t, p, postgres.Options{Bindings: []postgres.Binding{{
		Namespace: "n", Dataset: "d", Schema: "public", Table: "missing", KeyColumn: "id", KeyType: "text", DocumentColumn: "body", DocumentType: "jsonb",
	}}})
	w := s.Write(ctxT(t), []ports.WriteOp{{Kind: ports.WritePut, Address: domain.Address{Namespace: "n", Dataset: "d", Key: domain.StringKey("x")},
		Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{}`)}}})[0]
	if domain.CodeOf(w.Err) != domain.CodeFailedPrecondition {
		t.Fatalf("write to a bound table that does not exist: %+v", w)
	}
	for _, bad := range []string{`[{"namespace":"a"}]`, `[{"namespace":"a","dataset":"b","schema":"s","table":"t","key_column":"k","key_type":"int","document_column":"d","document_type":"jsonb"}]`,
		`[{"namespace":"a","dataset":"b","schema":"s","table":"t","key_column":"k","key_type":"text","document_column":"d","document_type":"jsonb","content_type":"text/plain"}]`} {
		if _, err := postgres.ParseBindings(bad); err == nil {
			t.Errorf("ParseBindings(%s) accepted it", bad)
		}
	}
}

// Concurrent merges of one legacy row, through the application with a
// counting profile, lose nothing: the row's first read-modify-write (on
// a row Sink never wrote) and every later one are atomic.
func TestLegacyConcurrentMerges(t *testing.T) {
	const writers, merges = 8, 50
	p, url := newPool(t, writers)
	pgtest.PSQL(t, url, `CREATE TABLE counters (id bigint PRIMARY KEY, body jsonb NOT NULL); INSERT INTO counters VALUES (1, '{"n": 0, "ids": []}')`)
	s := newStore(t, p, postgres.Options{Bindings: []postgres.Binding{{
		Namespace: "app", Dataset: "counters", Schema: "public", Table: "counters", KeyColumn: "id", KeyType: "bigint", DocumentColumn: "body", DocumentType: "jsonb",
	}}})
	cfg := application.DefaultConfig()
	cfg.Merge.MaxAttempts = 10000
	svc, err := application.NewService(cfg, s, []ports.MergeProfile{countprofile.New()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	a := domain.Address{Store: cfg.Store, Namespace: "app", Dataset: "counters", Key: domain.Int64Key(1)}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < merges; i++ {
				intent, err := countprofile.Encode(domain.ContentTypeJSON, countprofile.Intent{Add: 1, ID: fmt.Sprintf("w%d-%d", w, i)})
				if err != nil {
					errs <- err
					return
				}
				res, err := svc.Write(ctx, []domain.Mutation{{Kind: domain.MutationMerge, Address: a, Merge: domain.MergeIntent{Profile: countprofile.Name, Intent: intent}}}, application.WaitUntilApplied)
				if err != nil || res[0].Status != application.StatusApplied {
					errs <- fmt.Errorf("merge: %v %+v", err, res)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := pgtest.PSQL(t, url, `SELECT body->>'n', jsonb_array_length(body->'ids'), (SELECT count(DISTINCT x) FROM jsonb_array_elements_text(body->'ids') x) FROM counters WHERE id = 1`)
	if want := fmt.Sprintf("%d|%d|%d", writers*merges, writers*merges, writers*merges); got != want {
		t.Fatalf("counter n|ids|distinct ids = %s, want %s: merges were lost or applied twice", got, want)
	}
}
