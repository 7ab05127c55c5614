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

	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/integration/mongotest"
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
	cfg.Merge = application.RetryPolicy{MaxAttempts: 2000, BaseBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	if tune != nil {
		tune(&cfg)
	}
	svc, err := application.NewService(cfg, s, []ports.MergeProfile{counterProfile{}}, application.WithLogger(slog.New(slog.DiscardHandler)))
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
	c := client(t, srv.ConcurrentURI())
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
