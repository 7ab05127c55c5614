package mergepatch

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// mergeCases are the examples of RFC 7396, Appendix A, plus order and
// absence cases: target + patch = want, as JSON. TestMergeJSON runs them on
// JSON and TestMergeBSONMirrorsJSON on BSON.
var mergeCases = []struct{ target, patch, want string }{
	{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
	{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
	{`{"a":"b"}`, `{"a":null}`, `{}`},
	{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
	{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
	{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
	{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
	{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
	{`["a","b"]`, `["c","d"]`, `["c","d"]`},
	{`{"a":"b"}`, `["c"]`, `["c"]`},
	{`{"a":"foo"}`, `null`, `null`},
	{`{"a":"foo"}`, `"bar"`, `"bar"`},
	{`{"e":null}`, `{"a":1}`, `{"e":null,"a":1}`},
	{`[1,2]`, `{"a":"b","c":null}`, `{"a":"b"}`},
	{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
	// Member order of the target is kept, large numbers are exact.
	{`{"z":1,"a":2,"m":3}`, `{"a":20,"b":9007199254740993}`, `{"z":1,"a":20,"m":3,"b":9007199254740993}`},
}

func TestMergeJSON(t *testing.T) {
	for _, c := range mergeCases {
		got, err := MergeJSON([]byte(c.target), []byte(c.patch))
		if err != nil {
			t.Fatalf("%s + %s: %v", c.target, c.patch, err)
		}
		if string(got) != c.want {
			t.Errorf("%s + %s = %s, want %s", c.target, c.patch, got, c.want)
		}
	}
	got, err := MergeJSON(nil, []byte(`{"a":{"b":null,"c":1}}`))
	if err != nil || string(got) != `{"a":{"c":1}}` {
		t.Fatalf("merge into absence = %s, %v", got, err)
	}
}

func TestMergeJSONRejectsInvalid(t *testing.T) {
	if _, err := MergeJSON(nil, []byte(`{"a":`)); err == nil {
		t.Fatal("invalid intent accepted")
	}
	if _, err := MergeJSON([]byte(`{nope`), []byte(`{}`)); err == nil {
		t.Fatal("invalid current document accepted")
	}
	_, err := New().Merge(context.Background(), ports.MergeInput{Intent: domain.Document{ContentType: "application/json", Data: []byte("{")}})
	if domain.CodeOf(err) != domain.CodeInvalidArgument {
		t.Fatalf("profile error code = %v", domain.CodeOf(err))
	}
}

// fuzzDepth is the nesting limit of the fuzz targets: small, so that the
// fuzzer reaches it.
const fuzzDepth = 3

func FuzzMergeJSON(f *testing.F) {
	f.Add([]byte(`{"a":1}`), []byte(`{"a":null,"b":{"c":2}}`))
	f.Add([]byte(`[1]`), []byte(`"x"`))
	f.Add([]byte(`{"a":{"b":{"c":{"d":1}}}}`), []byte(`{"a":{"b":{"c":{"e":[]}}}}`))
	f.Add([]byte(`{"a":[[[1]]]}`), []byte(`{"a":{"b":[[]]}}`))
	f.Add([]byte(`{"a":1,"a":{"b":2}}`), []byte(`{"a":{"c":null},"a":{"d":3}}`))
	f.Fuzz(func(t *testing.T, target, patch []byte) {
		if len(target) == 0 {
			target = nil
		}
		out, err := mergeJSON(newRun(context.Background(), fuzzDepth), target, patch)
		if err != nil {
			if strings.Contains(err.Error(), "nesting depth") && jsonDepth(patch) <= fuzzDepth && jsonDepth(target) <= fuzzDepth {
				t.Fatalf("depth error for inputs within the limit: %v", err)
			}
			return
		}
		if jsonDepth(patch) > fuzzDepth || target != nil && jsonDepth(target) > fuzzDepth {
			t.Fatalf("inputs deeper than %d accepted", fuzzDepth)
		}
		if !json.Valid(out) || jsonDepth(out) > fuzzDepth {
			t.Fatalf("result %s is not valid JSON or deeper than %d", out, fuzzDepth)
		}
		// The result means what RFC 7396's pseudocode gives on decoded
		// values (member order and repeated names aside).
		var tv any
		if target != nil {
			tv = decodeNumbers(t, target)
		}
		if want, got := rfc7396(tv, decodeNumbers(t, patch)), decodeNumbers(t, out); !reflect.DeepEqual(got, want) {
			t.Fatalf("merge of %s into %s gave %s, RFC 7396 gives %v", patch, target, out, want)
		}
		// Merge patches are idempotent: applying the patch again changes nothing.
		again, err := mergeJSON(newRun(context.Background(), fuzzDepth), out, patch)
		if err != nil || string(again) != string(out) {
			t.Fatalf("not idempotent: %s then %s (%v)", out, again, err)
		}
	})
}

// decodeNumbers decodes the JSON value b, numbers as json.Number.
func decodeNumbers(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// rfc7396 is RFC 7396's MergePatch pseudocode on decoded values.
func rfc7396(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
		} else {
			t[k] = rfc7396(t[k], v)
		}
	}
	return t
}
