package mongodb

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/bsonwire"
)

// The applied mark is stored in the hidden field and read back exactly;
// a record without one reads a zero mark.
func TestMarkRoundTrip(t *testing.T) {
	e := encoder{hidden: "__sink", store: "primary"}
	rev := newRevision()
	other := revisionToken(newRevision())
	marks := map[string]domain.AppliedMark{
		"none":          {},
		"position only": {Position: domain.SourcePosition{Log: "topic-id", Partition: 3, Offset: 1 << 40}},
		"ring only":     {Recent: []domain.AppliedEntry{{ID: "key-1", Revision: other}}},
		"both": {Position: domain.SourcePosition{Log: "ünïcode log", Partition: -1, Offset: 0},
			Recent: []domain.AppliedEntry{{ID: "a", Revision: other}, {ID: "b", Revision: revisionToken(rev)}}},
		"foreign revision token": {Recent: []domain.AppliedEntry{{ID: "x", Revision: "not-an-object-id"}}},
	}
	in := marshal(t, bson.D{{Key: "z", Value: 1}, {Key: "a", Value: "x"}})
	for name, m := range marks {
		t.Run(name, func(t *testing.T) {
			b, err := e.body(domain.StringKey("k"), domain.Document{ContentType: domain.ContentTypeBSON, Data: in}, true)
			if err != nil {
				t.Fatal(err)
			}
			stored := e.assemble(b, true, rev, m)
			if err := bsonwire.Validate(stored); err != nil {
				t.Fatalf("stored document is invalid: %v", err)
			}
			meta := bson.Raw(stored).Lookup("__sink").Document()
			if _, err := meta.LookupErr("m"); (err == nil) == m.IsZero() {
				t.Fatalf("hidden field %v: the \"m\" member must be there exactly when the mark is not zero", meta)
			}
			r, err := e.clientRecord(stored)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(r.Document.Data, in) || r.Revision != revisionToken(rev) {
				t.Fatalf("read back %v rev %q", bson.Raw(r.Document.Data), r.Revision)
			}
			if r.Mark.Position != m.Position || !slices.Equal(r.Mark.Recent, m.Recent) {
				t.Fatalf("mark %+v, want %+v", r.Mark, m)
			}
		})
	}
}

// Hidden fields written before marks existed ({v, rev[, idAdded]}) read
// as before, with a zero mark; a malformed mark is an error naming the field.
func TestMarkOldLayoutAndMalformed(t *testing.T) {
	e := encoder{hidden: "__sink", store: "primary"}
	oid := bson.NewObjectID()
	old := marshal(t, bson.D{{Key: "_id", Value: "k"}, {Key: "a", Value: 1}, {Key: "__sink", Value: bson.D{{Key: "v", Value: int32(1)}, {Key: "rev", Value: oid}, {Key: "idAdded", Value: true}}}})
	r, err := e.clientRecord(old)
	if err != nil || r.Revision != revisionToken(oid) || !r.Mark.IsZero() {
		t.Fatalf("old layout: %v %q %+v", err, r.Revision, r.Mark)
	}
	if want := marshal(t, bson.D{{Key: "a", Value: 1}}); !bytes.Equal(r.Document.Data, want) {
		t.Fatalf("old layout read back %v", bson.Raw(r.Document.Data))
	}
	for name, m := range map[string]any{
		"not a document":   "x",
		"bad position":     bson.D{{Key: "l", Value: "log"}, {Key: "p", Value: "zero"}, {Key: "o", Value: int64(1)}},
		"ring not array":   bson.D{{Key: "r", Value: 1}},
		"entry without id": bson.D{{Key: "r", Value: bson.A{bson.D{{Key: "v", Value: oid}}}}},
		"bad entry rev":    bson.D{{Key: "r", Value: bson.A{bson.D{{Key: "i", Value: "a"}, {Key: "v", Value: 1}}}}},
	} {
		doc := marshal(t, bson.D{{Key: "_id", Value: "k"}, {Key: "__sink", Value: bson.D{{Key: "v", Value: int32(1)}, {Key: "rev", Value: oid}, {Key: "m", Value: m}}}})
		if _, err := e.clientRecord(doc); err == nil || !strings.Contains(err.Error(), "__sink") {
			t.Errorf("%s: error %v, want one naming the hidden field", name, err)
		}
	}
}

// The room reserved in the size check holds a full ring of the longest
// IDs and the longest log identity: the largest document the check accepts
// stays within MongoDB's limit when written with such a mark.
func TestMarkReserveCoversFullRing(t *testing.T) {
	for _, ring := range []int{1, domain.DefaultAppliedRing, domain.MaxAppliedRing} {
		e := encoder{hidden: "__sink", store: "primary", reserve: metaOverhead("__sink", ring)}
		k := domain.StringKey("k")
		// {b: binary(n)} is n+13 bytes; with the _id "k" (11 bytes) and the
		// reserve it must fit.
		n := MaxDocumentBytes - 13 - 11 - e.reserve
		doc := func(n int) domain.Document {
			return domain.Document{ContentType: domain.ContentTypeBSON, Data: marshal(t, bson.D{{Key: "b", Value: bson.Binary{Data: make([]byte, n)}}})}
		}
		b, err := e.body(k, doc(n), true)
		if err != nil {
			t.Fatalf("ring %d: the largest document: %v", ring, err)
		}
		if _, err := e.body(k, doc(n+1), false); err == nil {
			t.Fatalf("ring %d: a document one byte larger was accepted", ring)
		}
		m := domain.AppliedMark{Position: domain.SourcePosition{Log: strings.Repeat("l", domain.MaxLogBytes), Partition: -1 << 31, Offset: -1 << 63}}
		for i := range ring {
			id := strings.Repeat(string(rune('a'+i%26)), domain.MaxMutationIDBytes)
			m.Recent = append(m.Recent, domain.AppliedEntry{ID: id, Revision: revisionToken(newRevision())})
		}
		if got := len(e.assemble(b, true, newRevision(), m)); got != MaxDocumentBytes {
			t.Fatalf("ring %d: the largest document with a full mark is %d bytes, want exactly %d", ring, got, MaxDocumentBytes)
		}
	}
}
