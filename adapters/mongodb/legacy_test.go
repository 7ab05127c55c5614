package mongodb_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/adapters/mergepatch"
	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/ports"
)

// counterProfile is a merge profile that adds the intent's int64 "by" to the
// document's int64 "counter", leaving every other byte of the document as
// it is.
type counterProfile struct{}

func (counterProfile) Name() string           { return "count" }
func (counterProfile) ContentTypes() []string { return []string{domain.ContentTypeBSON} }

func (counterProfile) Merge(_ context.Context, in ports.MergeInput) (domain.Document, error) {
	cur, intent := in.Current, in.Intent
	by, err := bson.Raw(intent.Data).LookupErr("by")
	if err != nil {
		return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "intent has no by: %v", err)
	}
	var src []byte
	if cur != nil {
		src = cur.Data
	} else {
		src = bsoncore.NewDocumentBuilder().Build()
	}
	els, err := bsoncore.Document(src).Elements()
	if err != nil {
		return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "bad document: %v", err)
	}
	out := []byte{0, 0, 0, 0}
	found := false
	for _, el := range els {
		if el.Key() == "counter" {
			found = true
			out = bsoncore.AppendInt64Element(out, "counter", el.Value().Int64()+by.Int64())
			continue
		}
		out = append(out, el...)
	}
	if !found {
		out = bsoncore.AppendInt64Element(out, "counter", by.Int64())
	}
	out = append(out, 0)
	binary.LittleEndian.PutUint32(out, uint32(len(out)))
	return domain.Document{ContentType: domain.ContentTypeBSON, Data: out}, nil
}

func newService(t testing.TB, s ports.Storage, tune func(*application.Config)) *application.Service {
	t.Helper()
	cfg := application.DefaultConfig()
	cfg.Merge.RetryPolicy = application.RetryPolicy{MaxAttempts: 2000, BaseBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	if tune != nil {
		tune(&cfg)
	}
	svc, err := application.NewService(cfg, s, []ports.MergeProfile{counterProfile{}, mergepatch.New()}, application.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// legacyDocument is a document another application wrote: unusual field
// order, nested types, and no Sink metadata.
func legacyDocument(t testing.TB, srv *mongotest.Server) bson.D {
	dec, err := bson.ParseDecimal128("12345.6789")
	if err != nil {
		t.Fatal(err)
	}
	d := bson.D{
		{Key: "_id", Value: "legacy-1"},
		{Key: "zeta", Value: "last letter first"},
		{Key: "counter", Value: int64(0)},
		{Key: "nested", Value: bson.D{{Key: "b", Value: int32(2)}, {Key: "a", Value: bson.A{int64(1), "two", 3.5, bson.D{{Key: "deep", Value: true}}}}}},
		{Key: "int32", Value: int32(-7)},
		{Key: "int64", Value: int64(1) << 40},
		{Key: "double", Value: 0.1},
		{Key: "whole double", Value: 3.0},
		{Key: "when", Value: bson.NewDateTimeFromTime(time.Date(2001, 2, 3, 4, 5, 6, 7e6, time.UTC))},
		{Key: "uuid", Value: bson.Binary{Subtype: 4, Data: bytes.Repeat([]byte{0xab}, 16)}},
		{Key: "bin", Value: bson.Binary{Subtype: 0, Data: []byte{0, 1, 2, 255}}},
		{Key: "null", Value: nil},
		{Key: "oid", Value: bson.NewObjectID()},
		{Key: "Alpha", Value: "case matters"},
	}
	if !srv.IsFerretDB() {
		// FerretDB v1 does not support decimal128.
		d = append(d[:5], append(bson.D{{Key: "price", Value: dec}}, d[5:]...)...)
	}
	return d
}

func elementsByKey(t testing.TB, raw []byte) ([]string, map[string][]byte) {
	t.Helper()
	els, err := bsoncore.Document(raw).Elements()
	if err != nil {
		t.Fatal(err)
	}
	order := make([]string, len(els))
	m := map[string][]byte{}
	for i, el := range els {
		order[i] = el.Key()
		m[el.Key()] = el
	}
	return order, m
}

func TestLegacyDocumentConcurrentMerges(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	db := freshDatabase(t, c)
	ctx := ctxT(t)
	coll := c.Database(db).Collection("things")
	orig := mustMarshal(t, legacyDocument(t, srv))
	if _, err := coll.InsertOne(ctx, bson.Raw(orig)); err != nil {
		t.Fatalf("insert legacy document: %v", err)
	}
	stored, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "legacy-1"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, orig) {
		t.Fatalf("the server changed the document on insert:\n%v\n%v", bson.Raw(orig), stored)
	}

	s := newStore(t, c, mongodb.Options{})
	a := domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: domain.StringKey("legacy-1")}
	r := s.Read(ctx, []domain.Address{a})[0]
	if r.Err != nil || !r.Found || r.Record.Revision != mongodb.LegacyRevision || !bytes.Equal(r.Record.Document.Data, orig) {
		t.Fatalf("legacy read: found=%v err=%v rev=%q equal=%v", r.Found, r.Err, r.Record.Revision, bytes.Equal(r.Record.Document.Data, orig))
	}

	svc := newService(t, s, nil)
	const writers, merges = 16, 100
	intent := bsonDoc(t, bson.D{{Key: "by", Value: int64(1)}})
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	start := time.Now()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < merges; i++ {
				res, err := svc.Write(ctx, []domain.Mutation{{Kind: domain.MutationMerge, Address: a,
					Merge: domain.MergeIntent{Profile: "count", Intent: intent}}}, application.WaitUntilApplied)
				if err != nil {
					errs <- err
					return
				}
				if res[0].Status != application.StatusApplied {
					errs <- fmt.Errorf("merge %d: %s %v", i, res[0].Status, res[0].Err)
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
	t.Logf("%d×%d merges through the application service in %s", writers, merges, time.Since(start).Round(time.Millisecond))

	after, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "legacy-1"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := after.Lookup("counter").Int64OK(); !ok || n != writers*merges {
		t.Fatalf("counter = %v, want int64 %d", after.Lookup("counter"), writers*merges)
	}
	origOrder, origEls := elementsByKey(t, orig)
	afterOrder, afterEls := elementsByKey(t, after)
	if want := append(append([]string{}, origOrder...), "__sink"); strings.Join(afterOrder, ",") != strings.Join(want, ",") {
		t.Fatalf("field order changed:\n got %v\nwant %v", afterOrder, want)
	}
	for k, el := range origEls {
		if k != "counter" && !bytes.Equal(afterEls[k], el) {
			t.Errorf("field %q changed: %x -> %x", k, el, afterEls[k])
		}
	}
	meta := after.Lookup("__sink").Document()
	if _, ok := meta.Lookup("rev").ObjectIDOK(); !ok || meta.Lookup("v").Int32() != 1 {
		t.Fatalf("hidden field %v", meta)
	}
	if _, err := meta.LookupErr("idAdded"); err == nil {
		t.Fatal("the legacy document had its own _id, yet the metadata says Sink added it")
	}
	// Reads hide the field and return the revision.
	r = s.Read(ctx, []domain.Address{a})[0]
	if r.Record.Revision == mongodb.LegacyRevision || bytes.Contains(r.Record.Document.Data, []byte("__sink")) {
		t.Fatalf("read after Sink wrote: rev %q, %v", r.Record.Revision, bson.Raw(r.Record.Document.Data))
	}
}

func TestLegacyRevisionConditionalWrites(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	db := freshDatabase(t, c)
	ctx := ctxT(t)
	coll := c.Database(db).Collection("things")
	s := newStore(t, c, mongodb.Options{})
	a := domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: domain.Int64Key(42)}
	// A legacy document with an int32 _id is found under the int64 key.
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: int32(42)}, {Key: "v", Value: "old"}}); err != nil {
		t.Fatal(err)
	}
	r := s.Read(ctx, []domain.Address{a})[0]
	if !r.Found || r.Record.Revision != mongodb.LegacyRevision {
		t.Fatalf("legacy int32 _id: %+v", r)
	}
	put := func(v string, rev domain.Revision) ports.WriteResult {
		return s.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: bsonDoc(t, bson.D{{Key: "v", Value: v}}),
			Condition: ports.Condition{Kind: ports.ConditionRevision, Revision: rev}}})[0]
	}
	first := put("first", mongodb.LegacyRevision)
	if first.Err != nil || !first.Existed {
		t.Fatalf("first conditional write on a legacy record: %+v", first)
	}
	if second := put("second", mongodb.LegacyRevision); domain.CodeOf(second.Err) != domain.CodeRevisionMismatch {
		t.Fatalf("second write with the legacy token: %v, want REVISION_MISMATCH", second.Err)
	}
	if bad := put("bad", "not-a-token"); domain.CodeOf(bad.Err) != domain.CodeRevisionMismatch {
		t.Fatalf("foreign token: %v", bad.Err)
	}
	// Another application replaces the document without the hidden field:
	// it is legacy again, and Sink's old revision no longer matches.
	if _, err := coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: int64(42)}}, bson.D{{Key: "v", Value: "foreign"}}); err != nil {
		t.Fatal(err)
	}
	r = s.Read(ctx, []domain.Address{a})[0]
	if r.Record.Revision != mongodb.LegacyRevision {
		t.Fatalf("after a foreign replace: %q", r.Record.Revision)
	}
	if stale := put("stale", first.Revision); domain.CodeOf(stale.Err) != domain.CodeRevisionMismatch {
		t.Fatalf("stale Sink revision after a foreign replace: %v", stale.Err)
	}
	if n, _ := coll.CountDocuments(ctx, bson.D{{Key: "v", Value: "foreign"}}); n != 1 {
		t.Fatal("a failed conditional write changed the record")
	}
	// Deleting with the legacy token works while the record is legacy.
	d := s.Write(ctx, []ports.WriteOp{{Kind: ports.WriteDelete, Address: a, Condition: ports.Condition{Kind: ports.ConditionRevision, Revision: mongodb.LegacyRevision}}})[0]
	if d.Err != nil || !d.Existed {
		t.Fatalf("delete with the legacy token: %+v", d)
	}
	if n, _ := coll.CountDocuments(ctx, bson.D{}); n != 0 {
		t.Fatalf("%d documents left", n)
	}
}

// TestLegacyNumericIDs: records another program inserted with an int32, an
// int64 or an integral double _id are found under the int64 key, take puts
// and merges (BSON and JSON intents, through the application service), and
// keep their _id exactly as stored, type and value.
func TestLegacyNumericIDs(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	db := freshDatabase(t, c)
	ctx := ctxT(t)
	coll := c.Database(db).Collection("things")
	s := newStore(t, c, mongodb.Options{})
	svc := newService(t, s, nil)
	cases := []struct {
		name string
		id   any
		typ  bson.Type
	}{
		{"int32", int32(42), bson.TypeInt32},
		{"int64", int64(43), bson.TypeInt64},
		{"double", 44.0, bson.TypeDouble},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := map[string]int64{"int32": 42, "int64": 43, "double": 44}[tc.name]
			a := domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: domain.Int64Key(n)}
			if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: tc.id}, {Key: "name", Value: "legacy"}}); err != nil {
				t.Fatal(err)
			}
			// storedID checks the _id as the server holds it, and that there is one document.
			storedID := func(step string) bson.Raw {
				t.Helper()
				cur, err := coll.Find(ctx, bson.D{{Key: "_id", Value: n}})
				if err != nil {
					t.Fatal(err)
				}
				var docs []bson.Raw
				if err := cur.All(ctx, &docs); err != nil {
					t.Fatal(err)
				}
				if len(docs) != 1 {
					t.Fatalf("%s: %d documents with _id %d, want 1", step, len(docs), n)
				}
				id := docs[0].Lookup("_id")
				if id.Type != tc.typ || !id.Equal(bson.RawValue{Type: tc.typ, Value: mustMarshalValue(t, tc.id)}) {
					t.Fatalf("%s: stored _id is %s %v, want %s %v", step, id.Type, id, tc.typ, tc.id)
				}
				return docs[0]
			}
			// readID checks the _id Sink reads back (absent when Sink added it).
			readID := func(step string, wantID bool) bson.Raw {
				t.Helper()
				r := s.Read(ctx, []domain.Address{a})[0]
				if r.Err != nil || !r.Found {
					t.Fatalf("%s: read %+v", step, r)
				}
				doc := bson.Raw(r.Record.Document.Data)
				id, err := doc.LookupErr("_id")
				switch {
				case !wantID && err == nil:
					t.Fatalf("%s: read back an _id the client did not write: %v", step, doc)
				case wantID && (err != nil || id.Type != tc.typ):
					t.Fatalf("%s: read back _id %v, want type %s", step, id, tc.typ)
				}
				return doc
			}
			merge := func(step string, intent domain.Document) {
				t.Helper()
				res, err := svc.Write(ctx, []domain.Mutation{{Kind: domain.MutationMerge, Address: a,
					Merge: domain.MergeIntent{Profile: mergepatch.Name, Intent: intent}}}, application.WaitUntilApplied)
				if err != nil || res[0].Status != application.StatusApplied {
					t.Fatalf("%s: %v %+v", step, err, res)
				}
			}
			put := func(step string, doc domain.Document, mode domain.PutMode) {
				t.Helper()
				res, err := svc.Write(ctx, []domain.Mutation{{Kind: domain.MutationPut, Mode: mode, Address: a, Document: doc}}, application.WaitUntilApplied)
				if err != nil || res[0].Status != application.StatusApplied {
					t.Fatalf("%s: %v %+v", step, err, res)
				}
			}

			if r := s.Read(ctx, []domain.Address{a})[0]; r.Record.Revision != mongodb.LegacyRevision {
				t.Fatalf("legacy record read with revision %q", r.Record.Revision)
			}
			readID("legacy read", true)
			merge("BSON merge", bsonDoc(t, bson.D{{Key: "b", Value: int32(1)}}))
			storedID("after the BSON merge")
			merge("JSON merge", domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"j": {"$numberLong": "2"}}`)})
			got := storedID("after the JSON merge")
			if got.Lookup("b").Int32() != 1 || got.Lookup("j").Int64() != 2 || got.Lookup("name").StringValue() != "legacy" {
				t.Fatalf("merged document %v", got)
			}
			readID("read after merges", true)
			// The _id of the stored type, and of another numeric type of
			// the same value, name the same record; the stored type stays.
			put("put with the stored _id", bsonDoc(t, bson.D{{Key: "_id", Value: tc.id}, {Key: "v", Value: 1}}), domain.PutReplace)
			storedID("after a replace carrying the stored _id")
			readID("read after a put with _id", true)
			put("put with an int64 _id", bsonDoc(t, bson.D{{Key: "_id", Value: n}, {Key: "v", Value: 2}}), domain.PutUpsert)
			storedID("after an upsert carrying an int64 _id")
			put("put without _id", bsonDoc(t, bson.D{{Key: "v", Value: 3}}), domain.PutUpsert)
			storedID("after an upsert without _id")
			readID("read after a put without _id", false)
			merge("BSON merge after the put", bsonDoc(t, bson.D{{Key: "b", Value: int32(5)}}))
			if got := storedID("after the last merge"); got.Lookup("v").Int32() != 3 || got.Lookup("b").Int32() != 5 {
				t.Fatalf("merged document %v", got)
			}
			// Creating the record again collides with the legacy _id.
			res, err := svc.Write(ctx, []domain.Mutation{{Kind: domain.MutationPut, Mode: domain.PutCreate, Address: a, Document: bsonDoc(t, bson.D{})}}, application.WaitUntilApplied)
			if err != nil || res[0].Err == nil || res[0].Err.Code != domain.CodeAlreadyExists {
				t.Fatalf("create over a legacy numeric _id: %v %+v", err, res)
			}
			storedID("after the refused create")
		})
	}
	// A new record gets the key's int64 _id, whatever numeric _id the document carries.
	for i, idOf := range []func(int64) any{nil,
		func(k int64) any { return int32(k) }, func(k int64) any { return float64(k) }, func(k int64) any { return k }} {
		k := int64(100 + i)
		doc := bson.D{{Key: "v", Value: 1}}
		if idOf != nil {
			doc = append(bson.D{{Key: "_id", Value: idOf(k)}}, doc...)
		}
		a := domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: domain.Int64Key(k)}
		for _, mode := range []ports.ConditionKind{ports.ConditionNone, ports.ConditionAbsent} {
			if _, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: k}}); err != nil {
				t.Fatal(err)
			}
			r := s.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: bsonDoc(t, doc), Condition: ports.Condition{Kind: mode}}})[0]
			if r.Err != nil {
				t.Fatalf("new record %d (condition %v): %v", k, mode, r.Err)
			}
			raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: k}}).Raw()
			if err != nil {
				t.Fatal(err)
			}
			if id := raw.Lookup("_id"); id.Type != bson.TypeInt64 || id.Int64() != k {
				t.Fatalf("new record %d (condition %v, document %v): stored _id %s %v, want int64", k, mode, bson.Raw(bsonDoc(t, doc).Data), id.Type, id)
			}
		}
	}
}

func mustMarshalValue(t testing.TB, v any) []byte {
	t.Helper()
	_, b, err := bson.MarshalValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMergePatchCreatesAndKeepsID: with the merge-patch profile, a JSON
// intent on an absent record of this BSON-only store creates a BSON record,
// and an intent that would remove _id ({"_id": null}, JSON or BSON) fails as
// an invalid argument and leaves _id readable, on Sink's and on legacy
// records.
func TestMergePatchCreatesAndKeepsID(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	db := freshDatabase(t, c)
	ctx := ctxT(t)
	coll := c.Database(db).Collection("things")
	s := newStore(t, c, mongodb.Options{})
	svc := newService(t, s, nil)
	at := func(k domain.Key) domain.Address {
		return domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: k}
	}
	merge := func(a domain.Address, intent domain.Document) application.WriteResult {
		t.Helper()
		res, err := svc.Write(ctx, []domain.Mutation{{Kind: domain.MutationMerge, Address: a,
			Merge: domain.MergeIntent{Profile: mergepatch.Name, Intent: intent}}}, application.WaitUntilApplied)
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	jsonDoc := func(s string) domain.Document {
		return domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(s)}
	}

	// A JSON intent on an absent record creates a BSON record.
	created := at(domain.StringKey("new"))
	if r := merge(created, jsonDoc(`{"a": 1, "n": {"$numberLong": "5"}}`)); r.Status != application.StatusApplied {
		t.Fatalf("JSON merge into an absent record: %+v", r)
	}
	r := s.Read(ctx, []domain.Address{created})[0]
	if r.Err != nil || !r.Found || r.Record.Document.ContentType != domain.ContentTypeBSON {
		t.Fatalf("created record: %+v", r)
	}
	doc := bson.Raw(r.Record.Document.Data)
	if doc.Lookup("a").Int32() != 1 || doc.Lookup("n").Int64() != 5 {
		t.Fatalf("created record %v", doc)
	}
	if raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "new"}}).Raw(); err != nil || raw.Lookup("a").Int32() != 1 {
		t.Fatalf("stored record %v %v", raw, err)
	}

	// {"_id": null} is refused and _id stays, on a record Sink wrote with a
	// client _id and on legacy records with string and numeric _ids.
	own := at(domain.StringKey("own"))
	if w := s.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: own, Document: bsonDoc(t, bson.D{{Key: "_id", Value: "own"}, {Key: "a", Value: 1}})}})[0]; w.Err != nil {
		t.Fatal(w.Err)
	}
	if _, err := coll.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "legacy"}, {Key: "a", Value: 1}}, bson.D{{Key: "_id", Value: int32(9)}, {Key: "a", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []domain.Address{own, at(domain.StringKey("legacy")), at(domain.Int64Key(9))} {
		for _, intent := range []domain.Document{jsonDoc(`{"_id": null, "b": 2}`), bsonDoc(t, bson.D{{Key: "_id", Value: nil}, {Key: "b", Value: 2}})} {
			res := merge(a, intent)
			if res.Err == nil || res.Err.Code != domain.CodeInvalidArgument || !strings.Contains(res.Err.Message, "intent: _id") {
				t.Errorf("%s: merge removing _id (%s): %+v, want INVALID_ARGUMENT naming intent: _id", a, intent.ContentType, res)
			}
			got := s.Read(ctx, []domain.Address{a})[0]
			if got.Err != nil || !got.Found {
				t.Fatalf("%s: read %+v", a, got)
			}
			d := bson.Raw(got.Record.Document.Data)
			if _, err := d.LookupErr("_id"); err != nil {
				t.Errorf("%s: _id is gone from reads: %v", a, d)
			}
			if _, err := d.LookupErr("b"); err == nil {
				t.Errorf("%s: the refused merge was written: %v", a, d)
			}
		}
	}
}
