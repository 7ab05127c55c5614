package mergepatch

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/bsonwire"
	"github.com/sink-io/sink/ports"
)

func toBSON(t testing.TB, js string) []byte {
	t.Helper()
	b, err := JSONToBSON([]byte(js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return b
}

func toJSON(t testing.TB, b []byte) string {
	t.Helper()
	out, err := bson.MarshalExtJSON(bson.Raw(b), true, false) // canonical: types show
	if err != nil {
		t.Fatalf("%x: %v", b, err)
	}
	return string(out)
}

func mustBSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mergeCases (RFC 7396, Appendix A, plus order and absence cases), applied
// to BSON. BSON documents are objects, so every case also runs one level
// down, under the member "x", where targets and patches may be arrays,
// strings or null as in the RFC.
func TestMergeBSONMirrorsJSON(t *testing.T) {
	for _, c := range mergeCases {
		if strings.HasPrefix(c.target, "{") && strings.HasPrefix(c.patch, "{") {
			got, err := MergeBSON(toBSON(t, c.target), toBSON(t, c.patch))
			if err != nil {
				t.Fatalf("%s + %s: %v", c.target, c.patch, err)
			}
			if g, w := toJSON(t, got), toJSON(t, toBSON(t, c.want)); g != w {
				t.Errorf("%s + %s = %s, want %s", c.target, c.patch, g, w)
			}
		}
		target, patch := `{"k":0,"x":`+c.target+`}`, `{"x":`+c.patch+`}`
		want := `{"k":0,"x":` + c.want + `}`
		if c.want == "null" {
			want = `{"k":0}`
		}
		got, err := MergeBSON(toBSON(t, target), toBSON(t, patch))
		if err != nil {
			t.Fatalf("%s + %s: %v", target, patch, err)
		}
		if g, w := toJSON(t, got), toJSON(t, toBSON(t, want)); g != w {
			t.Errorf("%s + %s = %s, want %s", target, patch, g, w)
		}
	}
	got, err := MergeBSON(nil, toBSON(t, `{"a":{"b":null,"c":1}}`))
	if err != nil || toJSON(t, got) != `{"a":{"c":{"$numberInt":"1"}}}` {
		t.Fatalf("merge into absence = %s, %v", toJSON(t, got), err)
	}
}

func TestMergeBSONKeepsTypesOrderAndBytes(t *testing.T) {
	dec, _ := bson.ParseDecimal128("1.10")
	when := bson.NewDateTimeFromTime(time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC))
	target := mustBSON(t, bson.D{
		{Key: "_id", Value: bson.NewObjectID()},
		{Key: "n64", Value: int64(1)},
		{Key: "n32", Value: int32(2)},
		{Key: "f", Value: 2.0},
		{Key: "dec", Value: dec},
		{Key: "when", Value: when},
		{Key: "bin", Value: bson.Binary{Subtype: 4, Data: bytes.Repeat([]byte{1}, 16)}},
		{Key: "nested", Value: bson.D{{Key: "z", Value: int64(9)}, {Key: "a", Value: bson.A{int32(1)}}}},
		{Key: "gone", Value: "x"},
	})
	patch := mustBSON(t, bson.D{
		{Key: "n64", Value: int64(5)},
		{Key: "nested", Value: bson.D{{Key: "a", Value: nil}, {Key: "new", Value: bson.Undefined{}}}},
		{Key: "gone", Value: nil},
		{Key: "added", Value: int32(7)},
	})
	out, err := MergeBSON(target, patch)
	if err != nil {
		t.Fatal(err)
	}
	tEls, _ := bsoncore.Document(target).Elements()
	oEls, err := bsoncore.Document(out).Elements()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	byKey := map[string]bsoncore.Element{}
	for _, el := range oEls {
		keys = append(keys, el.Key())
		byKey[el.Key()] = el
	}
	if got := strings.Join(keys, ","); got != "_id,n64,n32,f,dec,when,bin,nested,added" {
		t.Fatalf("order %s", got)
	}
	for _, el := range tEls {
		switch el.Key() {
		case "n64", "nested", "gone":
		default:
			if !bytes.Equal(byKey[el.Key()], el) {
				t.Errorf("%s changed", el.Key())
			}
		}
	}
	if v := byKey["n64"].Value(); v.Type != bsoncore.TypeInt64 || v.Int64() != 5 {
		t.Errorf("n64 = %v", v)
	}
	if v := byKey["added"].Value(); v.Type != bsoncore.TypeInt32 {
		t.Errorf("added = %v", v)
	}
	nested := byKey["nested"].Value().Document()
	if toJSON(t, nested) != `{"z":{"$numberLong":"9"},"new":{"$undefined":true}}` {
		t.Errorf("nested = %s", toJSON(t, nested))
	}
}

func TestMergeBSONRejectsInvalid(t *testing.T) {
	good := mustBSON(t, bson.D{{Key: "a", Value: 1}})
	for name, c := range map[string][2][]byte{
		"truncated patch":       {good, good[:len(good)-1]},
		"trailing patch bytes":  {good, append(append([]byte{}, good...), 0)},
		"invalid target":        {[]byte{1, 2, 3}, good},
		"empty patch":           {good, nil},
		"corrupt nested length": {good, {13, 0, 0, 0, 3, 'a', 0, 99, 0, 0, 0, 0, 0}},
	} {
		if _, err := MergeBSON(c[0], c[1]); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestProfileRoutesByContentType(t *testing.T) {
	p := New()
	ctx := context.Background()
	bsonDoc := func(v any) *domain.Document {
		return &domain.Document{ContentType: domain.ContentTypeBSON, Data: mustBSON(t, v)}
	}
	cur := bsonDoc(bson.D{{Key: "n", Value: int64(1)}, {Key: "s", Value: "x"}})

	got, err := p.Merge(ctx, ports.MergeInput{Current: cur, Intent: *bsonDoc(bson.D{{Key: "s", Value: nil}, {Key: "t", Value: int64(2)}})})
	if err != nil || got.ContentType != domain.ContentTypeBSON || toJSON(t, got.Data) != `{"n":{"$numberLong":"1"},"t":{"$numberLong":"2"}}` {
		t.Fatalf("BSON on BSON: %v %s", err, toJSON(t, got.Data))
	}
	// A JSON intent on a BSON document is read as relaxed Extended JSON.
	got, err = p.Merge(ctx, ports.MergeInput{Current: cur, Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"n":{"$numberLong":"6"},"when":{"$date":"2020-01-01T00:00:00Z"},"i":3}`)}})
	if err != nil || got.ContentType != domain.ContentTypeBSON {
		t.Fatalf("JSON on BSON: %v", err)
	}
	r := bson.Raw(got.Data)
	if r.Lookup("n").Type != bson.TypeInt64 || r.Lookup("n").Int64() != 6 || r.Lookup("when").Type != bson.TypeDateTime || r.Lookup("i").Type != bson.TypeInt32 {
		t.Fatalf("JSON on BSON gave %s", toJSON(t, got.Data))
	}
	// A BSON intent on no document creates a BSON document.
	got, err = p.Merge(ctx, ports.MergeInput{Intent: *bsonDoc(bson.D{{Key: "a", Value: bson.D{{Key: "b", Value: nil}}}})})
	if err != nil || got.ContentType != domain.ContentTypeBSON || toJSON(t, got.Data) != `{"a":{}}` {
		t.Fatalf("BSON on nothing: %v %s", err, toJSON(t, got.Data))
	}
	got, err = p.Merge(ctx, ports.MergeInput{Current: &domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"a":1}`)}, Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"b":2}`)}})
	if err != nil || got.ContentType != domain.ContentTypeJSON || string(got.Data) != `{"a":1,"b":2}` {
		t.Fatalf("JSON on JSON: %v %s", err, got.Data)
	}
	for name, c := range map[string]struct {
		cur    *domain.Document
		intent domain.Document
		want   string
	}{
		"BSON intent on JSON":       {&domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{}`)}, *bsonDoc(bson.D{}), "cannot apply"},
		"JSON array on BSON":        {cur, domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`[1]`)}, "JSON object"},
		"invalid JSON on BSON":      {cur, domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"a":`)}, "not valid JSON"},
		"bad Extended JSON on BSON": {cur, domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"a":{"$numberLong":"x"}}`)}, "Extended JSON"},
		"malformed BSON intent":     {cur, domain.Document{ContentType: domain.ContentTypeBSON, Data: []byte{5, 0, 0}}, "intent: not a valid BSON"},
		"malformed BSON document":   {&domain.Document{ContentType: domain.ContentTypeBSON, Data: []byte{5, 0}}, *bsonDoc(bson.D{}), "current document: not a valid BSON"},
	} {
		_, err := p.Merge(ctx, ports.MergeInput{Current: c.cur, Intent: c.intent})
		if domain.CodeOf(err) != domain.CodeInvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT mentioning %q", name, err, c.want)
		}
	}
	if cts := p.ContentTypes(); len(cts) != 2 || cts[1] != domain.ContentTypeBSON {
		t.Fatalf("content types %v", cts)
	}
}

func FuzzMergeBSON(f *testing.F) {
	f.Add(mustBSON(f, bson.D{{Key: "a", Value: 1}, {Key: "b", Value: bson.D{{Key: "c", Value: "x"}}}}),
		mustBSON(f, bson.D{{Key: "a", Value: nil}, {Key: "b", Value: bson.D{{Key: "d", Value: int64(2)}}}}))
	f.Add(mustBSON(f, bson.D{}), mustBSON(f, bson.D{{Key: "x", Value: bson.A{1, nil}}}))
	f.Add([]byte{}, mustBSON(f, bson.D{{Key: "a", Value: bson.D{{Key: "b", Value: nil}}}}))
	f.Add(mustBSON(f, bson.D{{Key: "a", Value: bson.D{{Key: "b", Value: bson.D{{Key: "c", Value: bson.A{1}}}}}}}),
		mustBSON(f, bson.D{{Key: "a", Value: bson.D{{Key: "b", Value: bson.D{{Key: "c", Value: bson.D{{Key: "d", Value: 1}}}}}}}}))
	f.Add(mustBSON(f, bson.D{{Key: "_id", Value: 1}}), mustBSON(f, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: bson.D{}}}))
	f.Fuzz(func(t *testing.T, target, patch []byte) {
		if len(target) == 0 {
			target = nil
		}
		merge := func(target, patch []byte) ([]byte, error) {
			return mergeBSON(newRun(context.Background(), fuzzDepth), target, patch)
		}
		out, err := merge(target, patch)
		if err != nil {
			if strings.Contains(err.Error(), "nesting depth") && bsonwire.Validate(patch) == nil && bsonDepth(patch) <= fuzzDepth &&
				(target == nil || bsonwire.Validate(target) == nil && bsonDepth(target) <= fuzzDepth) {
				t.Fatalf("depth error for inputs within the limit: %v", err)
			}
			return
		}
		if bsonDepth(patch) > fuzzDepth || target != nil && bsonDepth(target) > fuzzDepth {
			t.Fatalf("inputs deeper than %d accepted", fuzzDepth)
		}
		if err := bsonwire.Validate(out); err != nil {
			t.Fatalf("result is not valid BSON: %v", err)
		}
		if bsonDepth(out) > fuzzDepth {
			t.Fatalf("result deeper than %d", fuzzDepth)
		}
		// The record key stays.
		if target != nil {
			if id, ok := lastID(target); ok {
				if got, err := bsoncore.Document(out).LookupErr("_id"); err != nil || got.Type != id.Type || !bytes.Equal(got.Data, id.Data) {
					t.Fatalf("_id changed")
				}
			}
		}
		// Merge patches are idempotent.
		again, err := merge(out, patch)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %x then %x (%v)", out, again, err)
		}
		// Every plain patch member is in the result byte for byte; null
		// members are gone.
		pels, _ := bsoncore.Document(patch).Elements()
		last := map[string]bsoncore.Element{}
		for _, el := range pels {
			last[el.Key()] = el
		}
		for k, el := range last {
			got, err := bsoncore.Document(out).LookupErr(k)
			switch el.Value().Type {
			case bsoncore.TypeNull:
				if err == nil {
					t.Fatalf("null member %q still present", k)
				}
			case bsoncore.TypeEmbeddedDocument:
				if err != nil || got.Type != bsoncore.TypeEmbeddedDocument {
					t.Fatalf("document member %q missing", k)
				}
			default:
				if err != nil || got.Type != el.Value().Type || !bytes.Equal(got.Data, el.Value().Data) {
					t.Fatalf("member %q not copied", k)
				}
			}
		}
	})
}

// lastID returns the value of the last "_id" element of a valid document.
func lastID(doc []byte) (bsoncore.Value, bool) {
	els, _ := bsoncore.Document(doc).Elements()
	var id bsoncore.Value
	found := false
	for _, el := range els {
		if el.Key() == "_id" {
			id, found = el.Value(), true
		}
	}
	return id, found
}
