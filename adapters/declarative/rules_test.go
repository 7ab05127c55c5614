package declarative

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// compile builds one profile named "t" from its YAML body (the keys under
// the profile, indented by four spaces).
func compile(t testing.TB, body string) *Profile {
	t.Helper()
	ps, err := Parse("test.yaml", []byte("profiles:\n  - name: t\n"+body), Options{})
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return ps[0]
}

func rules(rs ...string) string {
	return "    rules:\n" + "      - " + strings.Join(rs, "\n      - ") + "\n"
}

func jsonDoc(s string) domain.Document {
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(s)}
}

func bsonDoc_(t testing.TB, d bson.D) domain.Document {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return domain.Document{ContentType: domain.ContentTypeBSON, Data: b}
}

func merge(p *Profile, cur *domain.Document, intent domain.Document) (domain.Document, error) {
	return p.Merge(context.Background(), ports.MergeInput{Current: cur, Intent: intent})
}

type jsonCase struct {
	name    string
	rules   []string
	current string // "" = absent
	intent  string
	want    string // expected document, or
	wantErr string // a substring of the expected error
}

func runJSON(t *testing.T, cases []jsonCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := compile(t, rules(c.rules...))
			var cur *domain.Document
			if c.current != "" {
				d := jsonDoc(c.current)
				cur = &d
			}
			got, err := merge(p, cur, jsonDoc(c.intent))
			if c.wantErr != "" {
				if err == nil {
					t.Fatalf("got %s, want error %q", got.Data, c.wantErr)
				}
				if domain.CodeOf(err) != domain.CodeInvalidArgument || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v (%v), want invalid argument with %q", err, domain.CodeOf(err), c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Data) != c.want || got.ContentType != domain.ContentTypeJSON {
				t.Fatalf("got %s %s\nwant %s", got.ContentType, got.Data, c.want)
			}
		})
	}
}

func TestRulesJSON(t *testing.T) {
	runJSON(t, []jsonCase{
		// set
		{name: "set into absent record", rules: []string{`{op: set, path: /a/b, value: intent.v}`}, intent: `{"v":"x"}`, want: `{"a":{"b":"x"}}`},
		{name: "set replaces, keeps key order", rules: []string{`{op: set, path: /a, value: intent.v}`}, current: `{"a":1,"b":2}`, intent: `{"v":[1,2.5,true,null]}`, want: `{"a":[1,2.5,true,null],"b":2}`},
		{name: "set array element", rules: []string{`{op: set, path: /a/1, value: '"y"'}`}, current: `{"a":["x","z"]}`, intent: `{}`, want: `{"a":["x","y"]}`},
		{name: "set appends with -", rules: []string{`{op: set, path: /a/-, value: '3'}`}, current: `{"a":[1,2]}`, intent: `{}`, want: `{"a":[1,2,3]}`},
		{name: "set index out of range", rules: []string{`{op: set, path: /a/5, value: '3'}`}, current: `{"a":[1,2]}`, intent: `{}`, wantErr: "rules[0] (set /a/5): /a is an array of 2 items"},
		{name: "set through a scalar", rules: []string{`{op: set, path: /a/b, value: '3'}`}, current: `{"a":"s"}`, intent: `{}`, wantErr: "/a is a string, not an object or array"},
		{name: "set escaped pointer", rules: []string{`{op: set, path: /a~1b/c~0d, value: '1'}`}, intent: `{}`, want: `{"a/b":{"c~d":1}}`},
		{name: "set map value sorted keys", rules: []string{`{op: set, path: /m, value: '{"b": 1, "a": intent.x}'}`}, intent: `{"x":"é\n\"q\""}`, want: `{"m":{"a":"é\n\"q\"","b":1}}`},
		{name: "set with dynamic key", rules: []string{`{op: set, path: /by, key: intent.k, value: '1'}`}, intent: `{"k":"a/b"}`, want: `{"by":{"a/b":1}}`},
		{name: "key must be string or int", rules: []string{`{op: set, path: /by, key: intent.k, value: '1'}`}, intent: `{"k":true}`, wantErr: "key: the key must be a string or an int"},
		{name: "when false skips", rules: []string{`{op: set, path: /a, value: '1', when: 'has(intent.go)'}`}, current: `{"b":1}`, intent: `{}`, want: `{"b":1}`},
		{name: "missing intent field", rules: []string{`{op: set, path: /a, value: intent.nope}`}, intent: `{}`, wantErr: "rules[0] (set /a): value: evaluation failed: no such key: nope"},
		// set_if_absent
		{name: "set_if_absent sets", rules: []string{`{op: set_if_absent, path: /created, value: intent.t}`}, current: `{}`, intent: `{"t":5}`, want: `{"created":5}`},
		{name: "set_if_absent keeps", rules: []string{`{op: set_if_absent, path: /created, value: intent.t}`}, current: `{"created":1}`, intent: `{"t":5}`, want: `{"created":1}`},
		// remove
		{name: "remove key", rules: []string{`{op: remove, path: /a}`}, current: `{"a":1,"b":2}`, intent: `{}`, want: `{"b":2}`},
		{name: "remove missing is no-op", rules: []string{`{op: remove, path: /x/y}`}, current: `{"a":1}`, intent: `{}`, want: `{"a":1}`},
		{name: "remove array element", rules: []string{`{op: remove, path: /a/0}`}, current: `{"a":[1,2,3]}`, intent: `{}`, want: `{"a":[2,3]}`},
		{name: "remove dynamic key", rules: []string{`{op: remove, path: /m, key: intent.k}`}, current: `{"m":{"x":1,"y":2}}`, intent: `{"k":"x"}`, want: `{"m":{"y":2}}`},
		// add
		{name: "add to absent", rules: []string{`{op: add, path: /n, value: intent.by}`}, intent: `{"by":2}`, want: `{"n":2}`},
		{name: "add ints", rules: []string{`{op: add, path: /n, value: intent.by}`}, current: `{"n":40}`, intent: `{"by":2}`, want: `{"n":42}`},
		{name: "add to a double", rules: []string{`{op: add, path: /n, value: intent.by}`}, current: `{"n":1.5}`, intent: `{"by":2}`, want: `{"n":3.5}`},
		{name: "add a double to an int", rules: []string{`{op: add, path: /n, value: intent.by}`}, current: `{"n":1}`, intent: `{"by":0.5}`, wantErr: "the stored value is an integer and the value is not"},
		{name: "add overflow", rules: []string{`{op: add, path: /n, value: intent.by}`}, current: `{"n":9223372036854775807}`, intent: `{"by":1}`, wantErr: "overflows the stored 64-bit integer"},
		{name: "add to a string", rules: []string{`{op: add, path: /n, value: '1'}`}, current: `{"n":"x"}`, intent: `{}`, wantErr: "the stored value is a string, not a number"},
		{name: "add a string", rules: []string{`{op: add, path: /n, value: '"x"'}`}, current: `{"n":1}`, intent: `{}`, wantErr: "the value is a string, not a number"},
		{name: "add a string to absent", rules: []string{`{op: add, path: /n, value: '"x"'}`}, intent: `{}`, wantErr: "a string is not a number"},
		{name: "add in array", rules: []string{`{op: add, path: /a/1, value: '5'}`}, current: `{"a":[1,2]}`, intent: `{}`, want: `{"a":[1,7]}`},
		// max / min
		{name: "max keeps larger stored", rules: []string{`{op: max, path: /ts, value: intent.ts}`}, current: `{"ts":10}`, intent: `{"ts":5}`, want: `{"ts":10}`},
		{name: "max takes larger", rules: []string{`{op: max, path: /ts, value: intent.ts}`}, current: `{"ts":10}`, intent: `{"ts":11}`, want: `{"ts":11}`},
		{name: "min takes smaller", rules: []string{`{op: min, path: /ts, value: intent.ts}`}, current: `{"ts":10}`, intent: `{"ts":-3}`, want: `{"ts":-3}`},
		{name: "max strings", rules: []string{`{op: max, path: /t, value: intent.t}`}, current: `{"t":"2024-01-01"}`, intent: `{"t":"2025-01-01"}`, want: `{"t":"2025-01-01"}`},
		{name: "max absent", rules: []string{`{op: max, path: /t, value: intent.t}`}, intent: `{"t":1}`, want: `{"t":1}`},
		{name: "max string vs number", rules: []string{`{op: max, path: /t, value: intent.t}`}, current: `{"t":"a"}`, intent: `{"t":1}`, wantErr: "the stored value is a string and the value is a number"},
		// append
		{name: "append to absent", rules: []string{`{op: append, path: /e, value: intent.x, max_items: 2}`}, intent: `{"x":1}`, want: `{"e":[1]}`},
		{name: "append drops oldest", rules: []string{`{op: append, path: /e, value: intent.x, max_items: 2}`}, current: `{"e":[1,2]}`, intent: `{"x":3}`, want: `{"e":[2,3]}`},
		{name: "append drops newest", rules: []string{`{op: append, path: /e, value: intent.x, max_items: 2, drop: newest}`}, current: `{"e":[1,2]}`, intent: `{"x":3}`, want: `{"e":[1,2]}`},
		{name: "append full is an error", rules: []string{`{op: append, path: /e, value: intent.x, max_items: 2, drop: error}`}, current: `{"e":[1,2]}`, intent: `{"x":3}`, wantErr: "the array is full (max_items 2)"},
		{name: "append trims an over-full array", rules: []string{`{op: append, path: /e, value: intent.x, max_items: 2}`}, current: `{"e":[1,2,3,4]}`, intent: `{"x":5}`, want: `{"e":[4,5]}`},
		{name: "append to a non-array", rules: []string{`{op: append, path: /e, value: '1', max_items: 2}`}, current: `{"e":{}}`, intent: `{}`, wantErr: "the stored value is an object, not an array"},
		// sets
		{name: "add_to_set new", rules: []string{`{op: add_to_set, path: /s, value: intent.x}`}, current: `{"s":[1,"a"]}`, intent: `{"x":"b"}`, want: `{"s":[1,"a","b"]}`},
		{name: "add_to_set present (number equality)", rules: []string{`{op: add_to_set, path: /s, value: intent.x}`}, current: `{"s":[1.0,"a"]}`, intent: `{"x":1}`, want: `{"s":[1.0,"a"]}`},
		{name: "add_to_set object equality ignores key order", rules: []string{`{op: add_to_set, path: /s, value: intent.x}`}, current: `{"s":[{"b":2,"a":1}]}`, intent: `{"x":{"a":1,"b":2}}`, want: `{"s":[{"b":2,"a":1}]}`},
		{name: "add_to_set full", rules: []string{`{op: add_to_set, path: /s, value: intent.x, max_items: 1}`}, current: `{"s":[1]}`, intent: `{"x":2}`, wantErr: "the set is full"},
		{name: "remove_from_set", rules: []string{`{op: remove_from_set, path: /s, value: intent.x}`}, current: `{"s":[1,2,1,3]}`, intent: `{"x":1}`, want: `{"s":[2,3]}`},
		{name: "remove_from_set absent", rules: []string{`{op: remove_from_set, path: /s, value: intent.x}`}, current: `{}`, intent: `{"x":1}`, want: `{}`},
		// merge_patch
		{name: "merge_patch whole document", rules: []string{`{op: merge_patch, path: "", value: intent}`}, current: `{"a":1,"b":{"c":2,"d":3}}`, intent: `{"b":{"c":null,"e":4},"z":[1]}`, want: `{"a":1,"b":{"d":3,"e":4},"z":[1]}`},
		{name: "merge_patch at a path", rules: []string{`{op: merge_patch, path: /profile, value: intent.patch}`}, current: `{"profile":{"n":"a"}}`, intent: `{"patch":{"n":null,"m":1}}`, want: `{"profile":{"m":1}}`},
		{name: "merge_patch needs a map", rules: []string{`{op: merge_patch, path: /p, value: '[1]'}`}, intent: `{}`, wantErr: "not a map"},
		// require
		{name: "require holds", rules: []string{`{op: require, check: 'intent.n > 0'}`, `{op: set, path: /n, value: intent.n}`}, intent: `{"n":1}`, want: `{"n":1}`},
		{name: "require fails with its message", rules: []string{`{op: require, check: 'intent.n > 0', message: n must be positive}`}, intent: `{"n":0}`, wantErr: `profile "t": rules[0] (require): n must be positive`},
		{name: "require default message", rules: []string{`{op: require, check: 'intent.n > 0'}`}, intent: `{"n":0}`, wantErr: `the condition "intent.n > 0" does not hold`},
		{name: "dyn condition that is not a bool", rules: []string{`{op: require, check: 'intent.n'}`}, intent: `{"n":0}`, wantErr: "the condition is a int, not a bool"},
		// expressions see the record before the merge
		{name: "current is the record before the merge", rules: []string{`{op: set, path: /a, value: '2'}`, `{op: set, path: /b, value: current.a}`}, current: `{"a":1}`, intent: `{}`, want: `{"a":2,"b":1}`},
		// inputs
		{name: "intent must be an object", rules: []string{`{op: set, path: /a, value: '1'}`}, intent: `[1]`, wantErr: "intent: must be a JSON object"},
		{name: "intent not JSON", rules: []string{`{op: set, path: /a, value: '1'}`}, intent: `{"a":`, wantErr: "intent: not valid JSON"},
		{name: "duplicate keys rejected", rules: []string{`{op: set, path: /a, value: '1'}`}, intent: `{"a":1,"a":2}`, wantErr: "duplicate object key"},
		{name: "big JSON integers pass through untouched", rules: []string{`{op: set, path: /a, value: '1'}`}, current: `{"big":123456789012345678901234567890,"f":1e400}`, intent: `{}`, want: `{"big":123456789012345678901234567890,"f":1e400,"a":1}`},
	})
}

func TestAddressVariable(t *testing.T) {
	p := compile(t, rules(`{op: set, path: /k, value: 'address.store + "/" + address.namespace + "/" + address.dataset + "/" + address.key_kind + ":" + address.key'}`))
	addr := domain.Address{Store: "s", Namespace: "n", Dataset: "d", Key: domain.StringKey("k1")}
	got, err := p.Merge(context.Background(), ports.MergeInput{Address: addr, Intent: jsonDoc(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"k":"s/n/d/` + domain.KeyString.String() + `:k1"}`; string(got.Data) != want {
		t.Fatalf("got %s, want %s", got.Data, want)
	}
}

type bsonCase struct {
	name    string
	rules   []string
	current bson.D // nil = absent
	intent  bson.D
	want    bson.D
	wantErr string
}

func TestRulesBSON(t *testing.T) {
	oid := bson.NewObjectIDFromTimestamp(time.Unix(1700000000, 0))
	when := bson.NewDateTimeFromTime(time.UnixMilli(1700000000123))
	cases := []bsonCase{
		{name: "set keeps _id first and types of others", rules: []string{`{op: set, path: /a, value: intent.v}`},
			current: bson.D{{Key: "_id", Value: oid}, {Key: "i", Value: int32(1)}, {Key: "d", Value: when}, {Key: "bin", Value: bson.Binary{Data: []byte{1, 2}}}},
			intent:  bson.D{{Key: "v", Value: "x"}},
			want:    bson.D{{Key: "_id", Value: oid}, {Key: "i", Value: int32(1)}, {Key: "d", Value: when}, {Key: "bin", Value: bson.Binary{Data: []byte{1, 2}}}, {Key: "a", Value: "x"}}},
		{name: "set writes CEL ints as int64", rules: []string{`{op: set, path: /a, value: '1'}`}, intent: bson.D{}, want: bson.D{{Key: "a", Value: int64(1)}}},
		{name: "add keeps int32", rules: []string{`{op: add, path: /n, value: intent.by}`}, current: bson.D{{Key: "n", Value: int32(5)}}, intent: bson.D{{Key: "by", Value: int64(2)}}, want: bson.D{{Key: "n", Value: int32(7)}}},
		{name: "add keeps int64", rules: []string{`{op: add, path: /n, value: intent.by}`}, current: bson.D{{Key: "n", Value: int64(5)}}, intent: bson.D{{Key: "by", Value: int32(2)}}, want: bson.D{{Key: "n", Value: int64(7)}}},
		{name: "add keeps double", rules: []string{`{op: add, path: /n, value: intent.by}`}, current: bson.D{{Key: "n", Value: 1.5}}, intent: bson.D{{Key: "by", Value: int32(2)}}, want: bson.D{{Key: "n", Value: 3.5}}},
		{name: "add int32 overflow", rules: []string{`{op: add, path: /n, value: intent.by}`}, current: bson.D{{Key: "n", Value: int32(math.MaxInt32)}}, intent: bson.D{{Key: "by", Value: int32(1)}}, wantErr: "overflows the stored 32-bit integer"},
		{name: "add int64 overflow", rules: []string{`{op: add, path: /n, value: intent.by}`}, current: bson.D{{Key: "n", Value: int64(math.MinInt64)}}, intent: bson.D{{Key: "by", Value: int32(-1)}}, wantErr: "overflows the stored 64-bit integer"},
		{name: "add to ObjectId", rules: []string{`{op: add, path: /_id, value: '1'}`}, current: bson.D{{Key: "_id", Value: oid}}, intent: bson.D{}, wantErr: "not a number"},
		{name: "max keeps int32", rules: []string{`{op: max, path: /n, value: intent.n}`}, current: bson.D{{Key: "n", Value: int32(5)}}, intent: bson.D{{Key: "n", Value: int64(9)}}, want: bson.D{{Key: "n", Value: int32(9)}}},
		{name: "min int32 out of range", rules: []string{`{op: min, path: /n, value: intent.n}`}, current: bson.D{{Key: "n", Value: int32(5)}}, intent: bson.D{{Key: "n", Value: int64(math.MinInt64)}}, wantErr: "overflows the stored 32-bit integer"},
		{name: "append nested documents", rules: []string{`{op: append, path: /e, value: 'intent', max_items: 3}`}, current: bson.D{{Key: "e", Value: bson.A{bson.D{{Key: "x", Value: int32(1)}}}}}, intent: bson.D{{Key: "y", Value: int32(2)}},
			want: bson.D{{Key: "e", Value: bson.A{bson.D{{Key: "x", Value: int32(1)}}, bson.D{{Key: "y", Value: int64(2)}}}}}},
		{name: "add_to_set with numeric equality across types", rules: []string{`{op: add_to_set, path: /s, value: intent.x}`}, current: bson.D{{Key: "s", Value: bson.A{int32(1)}}}, intent: bson.D{{Key: "x", Value: int64(1)}}, want: bson.D{{Key: "s", Value: bson.A{int32(1)}}}},
		{name: "remove_from_set", rules: []string{`{op: remove_from_set, path: /s, value: intent.x}`}, current: bson.D{{Key: "s", Value: bson.A{int32(1), "a", int64(1)}}}, intent: bson.D{{Key: "x", Value: 1.0}}, want: bson.D{{Key: "s", Value: bson.A{"a"}}}},
		{name: "remove keeps order", rules: []string{`{op: remove, path: /b}`}, current: bson.D{{Key: "_id", Value: oid}, {Key: "b", Value: true}, {Key: "c", Value: nil}}, intent: bson.D{}, want: bson.D{{Key: "_id", Value: oid}, {Key: "c", Value: nil}}},
		{name: "set_if_absent", rules: []string{`{op: set_if_absent, path: /c, value: '"new"'}`}, current: bson.D{{Key: "c", Value: int32(1)}}, intent: bson.D{}, want: bson.D{{Key: "c", Value: int32(1)}}},
		{name: "merge_patch", rules: []string{`{op: merge_patch, path: "", value: intent}`}, current: bson.D{{Key: "_id", Value: oid}, {Key: "a", Value: int32(1)}, {Key: "b", Value: "x"}}, intent: bson.D{{Key: "b", Value: nil}, {Key: "c", Value: int32(3)}},
			want: bson.D{{Key: "_id", Value: oid}, {Key: "a", Value: int32(1)}, {Key: "c", Value: int64(3)}}},
		{name: "ObjectId and date are strings and timestamps in CEL", rules: []string{`{op: set, path: /s, value: 'current._id + "|" + string(current.d)'}`}, current: bson.D{{Key: "_id", Value: oid}, {Key: "d", Value: when}}, intent: bson.D{},
			want: bson.D{{Key: "_id", Value: oid}, {Key: "d", Value: when}, {Key: "s", Value: oid.Hex() + "|2023-11-14T22:13:20.123Z"}}},
		{name: "CEL timestamp becomes a BSON date", rules: []string{`{op: set, path: /t, value: 'timestamp("2023-11-14T22:13:20.123Z")'}`}, intent: bson.D{}, want: bson.D{{Key: "t", Value: when}}},
		{name: "missing path through array", rules: []string{`{op: set, path: /a/x, value: '1'}`}, current: bson.D{{Key: "a", Value: bson.A{}}}, intent: bson.D{}, wantErr: "/a is an array of 0 items"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := compile(t, rules(c.rules...))
			var cur *domain.Document
			if c.current != nil {
				d := bsonDoc_(t, c.current)
				cur = &d
			}
			got, err := merge(p, cur, bsonDoc_(t, c.intent))
			if c.wantErr != "" {
				if err == nil || domain.CodeOf(err) != domain.CodeInvalidArgument || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want invalid argument with %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := bsonDoc_(t, c.want)
			if got.ContentType != domain.ContentTypeBSON || !bytes.Equal(got.Data, want.Data) {
				t.Fatalf("got %v\nwant %v", bson.Raw(got.Data), bson.Raw(want.Data))
			}
		})
	}
}

// TestJSONIntentIntoBSON: a JSON intent merges into a BSON record (clients
// such as grpcurl send JSON), and a JSON intent creates BSON in a
// BSON-only store.
func TestJSONIntentIntoBSON(t *testing.T) {
	p := compile(t, rules(`{op: add, path: /n, value: intent.by}`))
	cur := bsonDoc_(t, bson.D{{Key: "n", Value: int64(1)}})
	got, err := merge(p, &cur, jsonDoc(`{"by":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := bsonDoc_(t, bson.D{{Key: "n", Value: int64(3)}}); !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("got %v", bson.Raw(got.Data))
	}
	got, err = p.Merge(context.Background(), ports.MergeInput{Intent: jsonDoc(`{"by":2}`), Accept: []string{domain.ContentTypeBSON}})
	if err != nil || got.ContentType != domain.ContentTypeBSON {
		t.Fatalf("%v %v", got, err)
	}
}

func TestInitialDocument(t *testing.T) {
	p := compile(t, "    initial: {n: 10, tags: [a], nested: {x: 1.5, y: null, z: true}}\n"+rules(`{op: add, path: /n, value: '1'}`))
	for i := 0; i < 2; i++ { // the initial document is copied, never changed
		got, err := merge(p, nil, jsonDoc(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"n":11,"tags":["a"],"nested":{"x":1.5,"y":null,"z":true}}`; string(got.Data) != want {
			t.Fatalf("got %s, want %s", got.Data, want)
		}
	}
	got, err := merge(p, nil, bsonDoc_(t, bson.D{}))
	if err != nil {
		t.Fatal(err)
	}
	want := bsonDoc_(t, bson.D{{Key: "n", Value: int64(11)}, {Key: "tags", Value: bson.A{"a"}}, {Key: "nested", Value: bson.D{{Key: "x", Value: 1.5}, {Key: "y", Value: nil}, {Key: "z", Value: true}}}})
	if !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("got %v", bson.Raw(got.Data))
	}
}
