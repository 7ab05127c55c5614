package mergepatch

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// jsonDepth returns the nesting depth of valid JSON: 0 for a top-level
// object or array with no container inside, -1 for a scalar.
func jsonDepth(b []byte) int {
	depth, deepest, inString := -1, -1, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// bsonDepth returns the nesting depth of a valid BSON document (0: no
// embedded document or array).
func bsonDepth(doc []byte) int {
	els, _ := bsoncore.Document(doc).Elements()
	d := 0
	for _, el := range els {
		if v := el.Value(); v.Type == bsoncore.TypeEmbeddedDocument || v.Type == bsoncore.TypeArray {
			d = max(d, 1+bsonDepth(v.Data))
		}
	}
	return d
}

// nestJSON returns levels of {"a": ...} around inner.
func nestJSON(levels int, inner string) []byte {
	return []byte(strings.Repeat(`{"a":`, levels) + inner + strings.Repeat(`}`, levels))
}

// nestBSON returns levels of {"a": ...} around the document inner, built
// without recursion.
func nestBSON(levels int, inner []byte) []byte {
	// Each level: int32 length, type 0x03, "a\x00", inner, NUL.
	n := len(inner) + 8*levels
	b := make([]byte, n)
	for i := 0; i < levels; i++ {
		start := 7 * i
		binary.LittleEndian.PutUint32(b[start:], uint32(n-start-i))
		b[start+4] = byte(bsoncore.TypeEmbeddedDocument)
		b[start+5] = 'a'
	}
	copy(b[7*levels:], inner)
	return b
}

func wantInvalid(t *testing.T, name string, err error, want ...string) {
	t.Helper()
	if domain.CodeOf(err) != domain.CodeInvalidArgument {
		t.Fatalf("%s: %v (code %v), want INVALID_ARGUMENT", name, err, domain.CodeOf(err))
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("%s: %q does not mention %q", name, err, w)
		}
	}
	if !utf8.ValidString(err.Error()) || len(err.Error()) > 400 {
		t.Fatalf("%s: message not valid UTF-8 or unbounded: %q", name, err)
	}
}

func jsonDoc(s string) domain.Document {
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(s)}
}

func bsonDocument(b []byte) domain.Document {
	return domain.Document{ContentType: domain.ContentTypeBSON, Data: b}
}

// The depth limit holds for the intent and the current document, JSON and
// BSON, objects and arrays, at the configured value, and names the path.
func TestNestingDepthIsBounded(t *testing.T) {
	ctx := context.Background()
	for _, max := range []int{0, 7} {
		p := New(WithMaxDepth(max))
		limit := max
		if limit == 0 {
			limit = DefaultMaxDepth
		}
		path := strings.TrimSuffix(strings.Repeat("/a", limit+1), "") // the deepest object's path
		at := func(s string) string {
			if len(s) > 40 {
				return s[:40]
			}
			return s
		}
		// At the limit: accepted, in both formats and for both inputs.
		okJSON := nestJSON(limit, `{"x":1}`)
		if _, err := p.Merge(ctx, ports.MergeInput{Current: ptr(jsonDoc(string(okJSON))), Intent: jsonDoc(string(okJSON))}); err != nil {
			t.Fatalf("limit %d: JSON at the limit: %v", limit, err)
		}
		okBSON := nestBSON(limit, toBSON(t, `{"x":1}`))
		if _, err := p.Merge(ctx, ports.MergeInput{Current: ptr(bsonDocument(okBSON)), Intent: bsonDocument(okBSON)}); err != nil {
			t.Fatalf("limit %d: BSON at the limit: %v", limit, err)
		}
		arr := strings.Repeat("[", limit) + strings.Repeat("]", limit)
		if _, err := p.Merge(ctx, ports.MergeInput{Intent: jsonDoc(`{"x":` + arr + `}`)}); err != nil {
			t.Fatalf("limit %d: arrays at the limit: %v", limit, err)
		}
		// One level more: rejected, naming the input and the path.
		deepJSON := string(nestJSON(limit+1, `{"x":1}`))
		deepBSON := nestBSON(limit+1, toBSON(t, `{"x":1}`))
		for name, in := range map[string]ports.MergeInput{
			"JSON intent":              {Intent: jsonDoc(deepJSON)},
			"JSON intent on BSON":      {Current: ptr(bsonDocument(okBSON)), Intent: jsonDoc(deepJSON)},
			"JSON intent, BSON store":  {Intent: jsonDoc(deepJSON), Accept: []string{domain.ContentTypeBSON}},
			"BSON intent":              {Intent: bsonDocument(deepBSON)},
			"JSON document":            {Current: ptr(jsonDoc(deepJSON)), Intent: jsonDoc(`{}`)},
			"BSON document":            {Current: ptr(bsonDocument(deepBSON)), Intent: bsonDocument(toBSON(t, `{}`))},
			"arrays in a JSON intent":  {Intent: jsonDoc(`{"x":[` + arr + `]}`)},
			"arrays in a BSON intent":  {Intent: bsonDocument(nestBSON(limit, toBSON(t, `{"x":[1]}`)))},
			"a patch that is an array": {Intent: jsonDoc(`[[` + arr + `]]`)},
		} {
			_, err := p.Merge(ctx, in)
			what := "intent"
			if strings.HasSuffix(name, "document") {
				what = "current document"
			}
			wantInvalid(t, fmt.Sprintf("limit %d: %s", limit, name), err, fmt.Sprintf("%s: nesting depth exceeds %d levels at /", what, limit))
			if strings.Contains(name, "intent") && !strings.Contains(name, "array") && !strings.Contains(err.Error(), at(path)) {
				t.Errorf("limit %d: %s: %q does not name the path %s", limit, name, err, at(path))
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// A 4 MiB document of nothing but nested empty objects is rejected at the
// limit, without deep recursion, whatever the format.
func TestNestedEmptyObjectsAreRejectedAtOnce(t *testing.T) {
	ctx := context.Background()
	p := New()
	levels := (4 << 20) / 7
	jsonBomb := jsonDoc(string(nestJSON(levels, `{}`)))
	bsonBomb := bsonDocument(nestBSON(levels, toBSON(t, `{}`)))
	arrayBomb := jsonDoc(strings.Repeat("[", 2<<20) + strings.Repeat("]", 2<<20))
	for name, in := range map[string]ports.MergeInput{
		"JSON intent":   {Intent: jsonBomb},
		"JSON document": {Current: &jsonBomb, Intent: jsonDoc(`{}`)},
		"BSON intent":   {Intent: bsonBomb},
		"BSON document": {Current: &bsonBomb, Intent: bsonDocument(toBSON(t, `{}`))},
		"JSON arrays":   {Intent: arrayBomb},
	} {
		_, err := p.Merge(ctx, in)
		wantInvalid(t, name, err, "nesting depth exceeds 100 levels")
	}
}

// The work of a merge is linear in its inputs: deleting or replacing every
// member of a document costs a bounded number of steps per member, however
// many there are (the old code re-indexed the rest of the document on every
// deletion).
func TestMergeWorkIsLinear(t *testing.T) {
	for _, n := range []int{1000, 20_000, 50_000} {
		target := jsonFlat(n, small)
		deleteAll := jsonFlat(n, func(int) string { return "null" })
		deleteOdd := jsonFlat(n, func(i int) string {
			if i%2 == 1 {
				return "null"
			}
			return small(i + 1)
		})
		for name, patch := range map[string][]byte{"delete all": deleteAll, "delete odd, replace even": deleteOdd} {
			r := newRun(context.Background(), 0)
			out, err := mergeJSON(r, target, patch)
			if err != nil {
				t.Fatal(err)
			}
			want := "{}"
			if name != "delete all" {
				var b strings.Builder
				b.WriteByte('{')
				for i := 0; i < n; i += 2 {
					if i > 0 {
						b.WriteByte(',')
					}
					fmt.Fprintf(&b, `"%s":%s`, benchKey(i), small(i+1))
				}
				b.WriteByte('}')
				want = b.String()
			}
			if string(out) != want {
				t.Fatalf("JSON %s of %d: wrong result (%d bytes)", name, n, len(out))
			}
			if r.work > 6*2*n {
				t.Errorf("JSON %s of %d members: %d steps, more than 6 per member", name, n, r.work)
			}

			bt, err := JSONToBSON(target)
			if err != nil {
				t.Fatal(err)
			}
			bp, err := JSONToBSON(patch)
			if err != nil {
				t.Fatal(err)
			}
			r = newRun(context.Background(), 0)
			bout, err := mergeBSON(r, bt, bp)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(bout, toBSON(t, want)) {
				t.Fatalf("BSON %s of %d: wrong result", name, n)
			}
			if r.work > 6*2*n {
				t.Errorf("BSON %s of %d members: %d steps, more than 6 per member", name, n, r.work)
			}
		}
	}
	// Depth does not multiply the work: a merge at the bottom of 100
	// levels reads each level once.
	flat := jsonFlat(5000, small)
	r := newRun(context.Background(), 0)
	if _, err := mergeJSON(r, nestJSON(99, string(flat)), nestJSON(99, `{"k000007":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if r.work > 4*(5000+2*99) {
		t.Errorf("deep JSON merge: %d steps", r.work)
	}
}

// A cancelled context stops a merge.
func TestMergeStopsWhenTheContextIsDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	target, patch := jsonFlat(3*checkEvery, small), jsonFlat(3*checkEvery, func(int) string { return "null" })
	bt, bp := toBSON(t, string(target)), toBSON(t, string(patch))
	for name, in := range map[string]ports.MergeInput{
		"JSON": {Current: ptr(jsonDoc(string(target))), Intent: jsonDoc(string(patch))},
		"BSON": {Current: ptr(bsonDocument(bt)), Intent: bsonDocument(bp)},
	} {
		_, err := New().Merge(ctx, in)
		if !errors.Is(err, context.Canceled) || domain.CodeOf(err) != domain.CodeCanceled {
			t.Errorf("%s: %v, want context.Canceled", name, err)
		}
	}
}

// Creating a record converts a JSON intent to the store's type when the
// store does not hold JSON; content types compare by media type.
func TestMergeCreatesTheStoresContentType(t *testing.T) {
	ctx := context.Background()
	p := New()
	intent := jsonDoc(`{"n":{"$numberLong":"5"},"a":{"b":null,"c":1}}`)
	for name, c := range map[string]struct {
		accept []string
		want   string
	}{
		"BSON store":              {[]string{domain.ContentTypeBSON}, domain.ContentTypeBSON},
		"BSON store, with params": {[]string{"Application/BSON; x=y"}, domain.ContentTypeBSON},
		"any store":               {nil, domain.ContentTypeJSON},
		"JSON first":              {[]string{domain.ContentTypeJSON, domain.ContentTypeBSON}, domain.ContentTypeJSON},
		"BSON first, JSON held":   {[]string{domain.ContentTypeBSON, domain.ContentTypeJSON}, domain.ContentTypeJSON},
	} {
		got, err := p.Merge(ctx, ports.MergeInput{Intent: intent, Accept: c.accept})
		if err != nil || got.ContentType != c.want {
			t.Fatalf("%s: %v, content type %q, want %q", name, err, got.ContentType, c.want)
		}
		if c.want == domain.ContentTypeBSON {
			if toJSON(t, got.Data) != `{"n":{"$numberLong":"5"},"a":{"c":{"$numberInt":"1"}}}` {
				t.Fatalf("%s: %s", name, toJSON(t, got.Data))
			}
		} else if string(got.Data) != `{"n":{"$numberLong":"5"},"a":{"c":1}}` {
			t.Fatalf("%s: %s", name, got.Data)
		}
	}
	// A BSON intent cannot create a record in a JSON-only store.
	_, err := p.Merge(ctx, ports.MergeInput{Intent: bsonDocument(toBSON(t, `{"a":1}`)), Accept: []string{domain.ContentTypeJSON}})
	wantInvalid(t, "BSON intent, JSON store", err, "intent", domain.ContentTypeBSON)

	// Parameters and case do not change the media type; the result keeps
	// the current document's content type as it is.
	cur := domain.Document{ContentType: "application/json; charset=utf-8", Data: []byte(`{"a":1}`)}
	got, err := p.Merge(ctx, ports.MergeInput{Current: &cur, Intent: domain.Document{ContentType: "Application/JSON;charset=UTF-8", Data: []byte(`{"b":2}`)}})
	if err != nil || got.ContentType != cur.ContentType || string(got.Data) != `{"a":1,"b":2}` {
		t.Fatalf("JSON with parameters: %v %q %s", err, got.ContentType, got.Data)
	}
	got, err = p.Merge(ctx, ports.MergeInput{Current: ptr(bsonDocument(toBSON(t, `{"a":1}`))), Intent: jsonDoc(`{"b":2}`)})
	if err != nil || got.ContentType != domain.ContentTypeBSON {
		t.Fatalf("JSON on BSON: %v %q", err, got.ContentType)
	}
}

// MessageForIDRemoval is the exact message (after the operation's prefix)
// of a merge that would remove a BSON record's _id.
const (
	messageForIDRemoval = "merge-patch: intent: _id: the record key cannot be removed by a merge"
	messageForIDChange  = "merge-patch: intent: _id: the record key cannot be changed by a merge"
)

// A BSON record's _id is its key: a merge can neither remove nor change it.
func TestMergeKeepsTheBSONRecordKey(t *testing.T) {
	ctx := context.Background()
	p := New()
	oid := bson.NewObjectID()
	cur := bsonDocument(mustBSON(t, bson.D{{Key: "_id", Value: oid}, {Key: "n", Value: int64(1)}, {Key: "sub", Value: bson.D{{Key: "_id", Value: 1}}}}))
	oidJSON := `{"$oid":"` + oid.Hex() + `"}`
	for name, c := range map[string]struct {
		intent domain.Document
		want   string
	}{
		"JSON null":        {jsonDoc(`{"_id":null}`), messageForIDRemoval},
		"BSON null":        {bsonDocument(mustBSON(t, bson.D{{Key: "_id", Value: nil}})), messageForIDRemoval},
		"null, then same":  {jsonDoc(`{"_id":null,"_id":` + oidJSON + `}`), ""},
		"same, then null":  {jsonDoc(`{"_id":` + oidJSON + `,"_id":null}`), messageForIDRemoval},
		"another ObjectID": {jsonDoc(`{"_id":{"$oid":"` + bson.NewObjectID().Hex() + `"}}`), messageForIDChange},
		"a string":         {jsonDoc(`{"_id":"x"}`), messageForIDChange},
		"a document":       {jsonDoc(`{"_id":{"a":1}}`), messageForIDChange},
		"the same value":   {jsonDoc(`{"_id":` + oidJSON + `,"m":2}`), ""},
		"BSON same value":  {bsonDocument(mustBSON(t, bson.D{{Key: "_id", Value: oid}})), ""},
		"a nested _id":     {jsonDoc(`{"sub":{"_id":null}}`), ""},
	} {
		got, err := p.Merge(ctx, ports.MergeInput{Current: &cur, Intent: c.intent})
		if c.want != "" {
			if domain.CodeOf(err) != domain.CodeInvalidArgument || err.Error() != c.want {
				t.Errorf("%s: %v, want INVALID_ARGUMENT %q", name, err, c.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if v, err := bson.Raw(got.Data).LookupErr("_id"); err != nil || v.Type != bson.TypeObjectID || v.ObjectID() != oid {
			t.Errorf("%s: _id is now %v (%v)", name, v, err)
		}
	}
	// A document with an _id whose value is an embedded document keeps it
	// through a merge that leaves it as it is.
	docID := bsonDocument(mustBSON(t, bson.D{{Key: "_id", Value: bson.D{{Key: "a", Value: 1}}}}))
	if _, err := p.Merge(ctx, ports.MergeInput{Current: &docID, Intent: jsonDoc(`{"_id":{}}`)}); err != nil {
		t.Errorf("empty merge into a document _id: %v", err)
	}
	if _, err := p.Merge(ctx, ports.MergeInput{Current: &docID, Intent: jsonDoc(`{"_id":{"a":null}}`)}); err == nil || err.Error() != messageForIDChange {
		t.Errorf("changing a document _id: %v", err)
	}
	// Creating a record: nothing to keep, RFC 7396 applies.
	if got, err := p.Merge(ctx, ports.MergeInput{Intent: jsonDoc(`{"_id":null,"a":1}`), Accept: []string{domain.ContentTypeBSON}}); err != nil || toJSON(t, got.Data) != `{"a":{"$numberInt":"1"}}` {
		t.Errorf("creating: %v", err)
	}
	// JSON documents have no record key field: "_id" is an ordinary member.
	got, err := p.Merge(ctx, ports.MergeInput{Current: ptr(jsonDoc(`{"_id":1,"a":2}`)), Intent: jsonDoc(`{"_id":null}`)})
	if err != nil || string(got.Data) != `{"a":2}` {
		t.Errorf("JSON _id: %v %s", err, got.Data)
	}
}

// Error messages name the input, the path and the problem; they never
// quote the client's values.
func TestMessagesDoNotQuoteValues(t *testing.T) {
	ctx := context.Background()
	p := New()
	cur := bsonDocument(toBSON(t, `{"a":1}`))
	for name, c := range map[string]struct {
		in   ports.MergeInput
		want []string
	}{
		"bad $date":          {ports.MergeInput{Current: &cur, Intent: jsonDoc(`{"a":{"$date":"SECRET"}}`)}, []string{"intent: /a: ", "$date"}},
		"bad $numberLong":    {ports.MergeInput{Current: &cur, Intent: jsonDoc(`{"x":[1,{"$numberLong":"SECRET"}]}`)}, []string{"intent: /x/1: ", "$numberLong"}},
		"bad $oid, creating": {ports.MergeInput{Intent: jsonDoc(`{"b":{"c":{"$oid":"SECRET"}}}`), Accept: []string{domain.ContentTypeBSON}}, []string{"intent: /b/c: ", "$oid"}},
		"bad $binary":        {ports.MergeInput{Current: &cur, Intent: jsonDoc(`{"a":{"$binary":{"base64":"SECRET!","subType":"00"}}}`)}, []string{"intent: /a: "}},
		"NUL in a name":      {ports.MergeInput{Current: &cur, Intent: jsonDoc(`{"a\u0000b":"SECRET"}`)}, []string{"intent: ", "NUL"}},
		"invalid JSON":       {ports.MergeInput{Intent: jsonDoc(`{"a":"SECRET" SECRET}`)}, []string{"intent: not valid JSON"}},
		"invalid document":   {ports.MergeInput{Current: ptr(jsonDoc(`{"a":SECRET}`)), Intent: jsonDoc(`{}`)}, []string{"current document: not valid JSON"}},
		"JSON array on BSON": {ports.MergeInput{Current: &cur, Intent: jsonDoc(`["SECRET"]`)}, []string{"JSON object"}},
	} {
		_, err := p.Merge(ctx, c.in)
		wantInvalid(t, name, err, c.want...)
		if strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: the message quotes the input: %q", name, err)
		}
	}
	// The old message came from the Extended JSON parser and quoted values.
	if _, err := JSONToBSON([]byte(`{"a":{"$date":"SECRET"}}`)); err == nil || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("JSONToBSON: %v", err)
	}
}

// Paths in messages are bounded, valid UTF-8 and free of control characters.
func TestPathsAreShortened(t *testing.T) {
	long := strings.Repeat("k", 500) + "\xff\n/~"
	in := `{"` + long + `":` + string(nestJSON(200, `1`)) + `}`
	_, err := New().Merge(context.Background(), ports.MergeInput{Intent: jsonDoc(strings.ReplaceAll(in, "\n", `\n`))})
	wantInvalid(t, "long path", err, "nesting depth exceeds 100 levels at /kkkk", "…", "levels)")
	if strings.Contains(err.Error(), "\n") || strings.Count(err.Error(), "k") > 40 {
		t.Fatalf("path not shortened: %q", err)
	}
	at := path{}
	at.pushKey([]byte("a/b~c\x01"), false)
	at.pushIndex(3)
	if got := at.String(); got != "/a~1b~0c?/3" {
		t.Fatalf("path %q", got)
	}
}

// Repeated member names count once, at the first position, with the last
// value, in documents and intents, JSON and BSON (as before the rewrite).
func TestRepeatedNames(t *testing.T) {
	cases := []struct{ target, patch, want string }{
		{`{"a":1,"b":2,"a":3}`, `{"c":4}`, `{"a":3,"b":2,"c":4}`},
		{`{"z":0}`, `{"x":{"p":1},"y":1,"x":{"q":2}}`, `{"z":0,"x":{"q":2},"y":1}`},
		{`{"x":{"p":0}}`, `{"x":{"p":1},"x":{"q":2}}`, `{"x":{"p":0,"q":2}}`},
		{`{}`, `{"n":null,"n":1}`, `{"n":1}`},
		{`{}`, `{"n":1,"n":null}`, `{}`},
		{`{"n":0,"m":1}`, `{"n":null,"n":{"a":null}}`, `{"n":{},"m":1}`},
		{`{"a":{"x":1},"a":5}`, `{"a":{"y":2}}`, `{"a":{"y":2}}`},
	}
	for _, c := range cases {
		got, err := MergeJSON([]byte(c.target), []byte(c.patch))
		if err != nil || string(got) != c.want {
			t.Errorf("JSON %s + %s = %s (%v), want %s", c.target, c.patch, got, err, c.want)
		}
		bgot, err := MergeBSON(toBSON(t, c.target), toBSON(t, c.patch))
		if err != nil || toJSON(t, bgot) != toJSON(t, toBSON(t, c.want)) {
			t.Errorf("BSON %s + %s = %s (%v), want %s", c.target, c.patch, toJSON(t, bgot), err, c.want)
		}
	}
}
