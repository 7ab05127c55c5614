package mongodb

import (
	"bytes"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/bsonwire"
)

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func keys(t testing.TB, b []byte) []string {
	t.Helper()
	els, err := bsoncore.Document(b).Elements()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(els))
	for i, el := range els {
		out[i] = el.Key()
	}
	return out
}

func TestStoredDocumentLayoutAndRoundTrip(t *testing.T) {
	e := encoder{hidden: "__sink", store: "primary"}
	k := domain.StringKey("k1")
	cases := []struct {
		name     string
		doc      bson.D
		stored   []string
		readBack bson.D // nil: the client's bytes exactly
	}{
		{"no _id", bson.D{{Key: "z", Value: 1}, {Key: "a", Value: "x"}}, []string{"_id", "z", "a", "__sink"}, nil},
		{"empty", bson.D{}, []string{"_id", "__sink"}, nil},
		{"_id first", bson.D{{Key: "_id", Value: "k1"}, {Key: "b", Value: int64(2)}}, []string{"_id", "b", "__sink"}, nil},
		{"_id last is moved first", bson.D{{Key: "b", Value: int64(2)}, {Key: "_id", Value: "k1"}},
			[]string{"_id", "b", "__sink"}, bson.D{{Key: "_id", Value: "k1"}, {Key: "b", Value: int64(2)}}},
		{"nested hidden name is fine", bson.D{{Key: "x", Value: bson.D{{Key: "__sink", Value: 1}}}}, []string{"_id", "x", "__sink"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := marshal(t, c.doc)
			rev := newRevision()
			stored, err := e.storedDocument(k, domain.Document{ContentType: domain.ContentTypeBSON, Data: in}, &rev)
			if err != nil {
				t.Fatal(err)
			}
			if err := bsonwire.Validate(stored); err != nil {
				t.Fatalf("stored document is invalid: %v", err)
			}
			if got := keys(t, stored); strings.Join(got, ",") != strings.Join(c.stored, ",") {
				t.Fatalf("stored fields %v, want %v", got, c.stored)
			}
			if id := bsoncore.Document(stored).Lookup("_id"); id.StringValue() != "k1" {
				t.Fatalf("stored _id %v", id)
			}
			doc, gotRev, err := e.clientDocument(stored)
			if err != nil {
				t.Fatal(err)
			}
			want := in
			if c.readBack != nil {
				want = marshal(t, c.readBack)
			}
			if !bytes.Equal(doc.Data, want) || doc.ContentType != domain.ContentTypeBSON {
				t.Fatalf("read back %v, want %v", bson.Raw(doc.Data), bson.Raw(want))
			}
			if gotRev != revisionToken(rev) {
				t.Fatalf("revision %q, want %q", gotRev, revisionToken(rev))
			}
			if r, ok := parseRevision(gotRev); !ok || r != rev {
				t.Fatalf("revision token does not parse back")
			}
		})
	}
}

func TestClientDocumentOfLegacyAndForeignLayouts(t *testing.T) {
	e := encoder{hidden: "__sink", store: "primary"}
	legacy := marshal(t, bson.D{{Key: "_id", Value: int32(7)}, {Key: "b", Value: 1}, {Key: "a", Value: 2.5}})
	doc, rev, err := e.clientDocument(legacy)
	if err != nil || rev != LegacyRevision || !bytes.Equal(doc.Data, legacy) {
		t.Fatalf("legacy: %v %q %v", err, rev, bson.Raw(doc.Data))
	}
	// Another application appended a field after Sink's: only the hidden field goes.
	oid := bson.NewObjectID()
	mixed := marshal(t, bson.D{{Key: "_id", Value: "k"}, {Key: "a", Value: 1}, {Key: "__sink", Value: bson.D{{Key: "v", Value: 1}, {Key: "rev", Value: oid}}}, {Key: "later", Value: true}})
	doc, rev, err = e.clientDocument(mixed)
	if err != nil || rev != revisionToken(oid) {
		t.Fatalf("mixed: %v %q", err, rev)
	}
	if want := marshal(t, bson.D{{Key: "_id", Value: "k"}, {Key: "a", Value: 1}, {Key: "later", Value: true}}); !bytes.Equal(doc.Data, want) {
		t.Fatalf("mixed read back %v", bson.Raw(doc.Data))
	}
	for name, bad := range map[string]bson.D{
		"not a document": {{Key: "_id", Value: "k"}, {Key: "__sink", Value: 3}},
		"no rev":         {{Key: "_id", Value: "k"}, {Key: "__sink", Value: bson.D{{Key: "v", Value: 1}}}},
		"rev not an oid": {{Key: "_id", Value: "k"}, {Key: "__sink", Value: bson.D{{Key: "rev", Value: int64(4)}}}},
	} {
		if _, _, err := e.clientDocument(marshal(t, bad)); err == nil || !strings.Contains(err.Error(), "__sink") {
			t.Errorf("%s: error %v, want one naming the hidden field", name, err)
		}
	}
}

func TestRevisionTokens(t *testing.T) {
	a, b := newRevision(), newRevision()
	if a == b || revisionToken(a) == revisionToken(b) {
		t.Fatal("revisions repeat")
	}
	for _, bad := range []domain.Revision{"", LegacyRevision, "zz", domain.Revision(strings.Repeat("g", 24)), "1"} {
		if _, ok := parseRevision(bad); ok {
			t.Errorf("token %q parsed", bad)
		}
	}
}

func TestValidateBSON(t *testing.T) {
	good := marshal(t, bson.D{
		{Key: "s", Value: "x"}, {Key: "d", Value: bson.D{{Key: "a", Value: bson.A{1, "b", bson.D{}}}}},
		{Key: "bin", Value: bson.Binary{Subtype: 4, Data: make([]byte, 16)}}, {Key: "re", Value: bson.Regex{Pattern: "a", Options: "i"}},
		{Key: "dec", Value: bson.NewDecimal128(1, 2)}, {Key: "cws", Value: bson.CodeWithScope{Code: "x", Scope: bson.D{{Key: "a", Value: 1}}}},
		{Key: "min", Value: bson.MinKey{}}, {Key: "ts", Value: bson.Timestamp{T: 1, I: 2}}, {Key: "ptr", Value: bson.DBPointer{DB: "a", Pointer: bson.NewObjectID()}},
	})
	if err := bsonwire.Validate(good); err != nil {
		t.Fatalf("valid document rejected: %v", err)
	}
	nested := func(depth int) []byte {
		var v any = bson.D{}
		for i := 0; i < depth; i++ {
			v = bson.D{{Key: "n", Value: v}}
		}
		return marshal(t, v)
	}
	if err := bsonwire.Validate(nested(bsonwire.MaxNesting)); err != nil {
		t.Fatalf("%d levels rejected: %v", bsonwire.MaxNesting, err)
	}
	corruptNested := bytes.Clone(good)
	// Break the NUL terminator of the embedded document "d".
	i := bytes.Index(corruptNested, []byte("d\x00")) + 2
	corruptNested[i+int(bsoncore.Document(corruptNested[i:]).Index(0).Value().Data[0])] = 1
	bad := map[string][]byte{
		"empty":             nil,
		"short":             {5, 0, 0},
		"length too big":    {9, 0, 0, 0, 0},
		"no terminator":     {5, 0, 0, 0, 1},
		"trailing bytes":    append(marshal(t, bson.D{}), 0),
		"unknown type":      {8, 0, 0, 0, 0x42, 'a', 0, 0},
		"truncated int64":   {10, 0, 0, 0, 0x12, 'a', 0, 1, 2, 0},
		"bad bool":          {9, 0, 0, 0, 0x08, 'a', 0, 7, 0},
		"string no nul":     {14, 0, 0, 0, 0x02, 'a', 0, 2, 0, 0, 0, 'x', 'y', 0},
		"negative length":   {0xff, 0xff, 0xff, 0xff, 0},
		"too deep":          nested(bsonwire.MaxNesting + 1),
		"bad nested length": append(append([]byte{}, good[:len(good)-1]...), 0x03),
		"corrupt nested":    corruptNested,
	}
	for name, b := range bad {
		if err := bsonwire.Validate(b); err == nil {
			t.Errorf("%s: accepted %x", name, b)
		}
	}
}

// Every document validateBSON accepts is stored and read back unchanged.
func FuzzStoredDocumentRoundTrip(f *testing.F) {
	f.Add(marshal(f, bson.D{{Key: "a", Value: 1}}))
	f.Add(marshal(f, bson.D{{Key: "_id", Value: "k"}, {Key: "x", Value: bson.A{bson.D{{Key: "y", Value: nil}}}}}))
	f.Add(marshal(f, bson.D{{Key: "__sink", Value: 1}}))
	f.Add([]byte{5, 0, 0, 0, 0})
	e := encoder{hidden: "__sink", store: "primary"}
	f.Fuzz(func(t *testing.T, b []byte) {
		rev := newRevision()
		stored, err := e.storedDocument(domain.StringKey("k"), domain.Document{ContentType: domain.ContentTypeBSON, Data: b}, &rev)
		if err != nil {
			return
		}
		if err := bsonwire.Validate(stored); err != nil {
			t.Fatalf("stored document invalid: %v", err)
		}
		doc, r, err := e.clientDocument(stored)
		if err != nil || r != revisionToken(rev) {
			t.Fatalf("read back: %v %q", err, r)
		}
		ks := keys(t, b)
		idAt := -1
		for i, k := range ks {
			if k == "_id" {
				idAt = i
			}
		}
		if idAt <= 0 {
			if !bytes.Equal(doc.Data, b) {
				t.Fatalf("round trip changed %x into %x", b, doc.Data)
			}
			return
		}
		// A client _id elsewhere is moved first; nothing else changes.
		got := keys(t, doc.Data)
		want := append([]string{"_id"}, append(append([]string{}, ks[:idAt]...), ks[idAt+1:]...)...)
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") || len(doc.Data) != len(b) {
			t.Fatalf("round trip of %x gave fields %q, want %q", b, got, want)
		}
	})
}

// Replacements go out without _id (MongoDB keeps the stored one), the rest
// of the stored document byte for byte.
func TestWithoutID(t *testing.T) {
	e := encoder{hidden: "__sink", store: "primary"}
	for _, k := range []domain.Key{domain.StringKey("k1"), domain.Int64Key(42), domain.BytesKey([]byte{1, 2}), domain.ObjectIDKey(make([]byte, 12))} {
		rev := newRevision()
		b, err := e.body(k, domain.Document{ContentType: domain.ContentTypeBSON, Data: marshal(t, bson.D{{Key: "a", Value: 1}})}, true)
		if err != nil {
			t.Fatal(err)
		}
		full := e.assemble(b, true, rev, domain.AppliedMark{})
		idLen := len(bsoncore.Document(full).Index(0))
		repl := e.assemble(b, false, rev, domain.AppliedMark{})
		if err := bsonwire.Validate(repl); err != nil {
			t.Fatalf("%v: replacement is invalid: %v", k, err)
		}
		if got := keys(t, repl); strings.Join(got, ",") != "a,__sink" {
			t.Fatalf("%v: replacement fields %v", k, got)
		}
		if !bytes.Equal(repl[4:], full[4+idLen:]) {
			t.Fatalf("%v: replacement body differs", k)
		}
	}
}

func TestSameKey(t *testing.T) {
	v := func(x any) bsoncore.Value {
		typ, data, err := bson.MarshalValue(x)
		if err != nil {
			t.Fatal(err)
		}
		return bsoncore.Value{Type: bsoncore.Type(typ), Data: data}
	}
	k42, _ := keyValue(domain.Int64Key(42))
	ks, _ := keyValue(domain.StringKey("42"))
	for _, c := range []struct {
		got  bsoncore.Value
		want bsoncore.Value
		same bool
	}{
		{v(int64(42)), k42, true}, {v(int32(42)), k42, true}, {v(42.0), k42, true},
		{v(int32(41)), k42, false}, {v(42.5), k42, false}, {v("42"), k42, false}, {v(1e300), k42, false},
		{v("42"), ks, true}, {v(int32(42)), ks, false}, {v(int64(42)), ks, false},
	} {
		if got := sameKey(c.got, c.want); got != c.same {
			t.Errorf("sameKey(%v, %v) = %v, want %v", c.got, c.want, got, c.same)
		}
	}
}

func TestDescribeRevision(t *testing.T) {
	rev := revisionToken(newRevision())
	for r, want := range map[domain.Revision]string{
		rev:            string(rev),
		LegacyRevision: "legacy",
		"\xff\xfeabc":  "(a token of 5 bytes this store never issued)",
	} {
		if got := describeRevision(r); got != want {
			t.Errorf("describeRevision(%q) = %q, want %q", r, got, want)
		}
	}
}
