package declarative

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// FuzzDeclarative: whatever the rules, current document and intent, loading
// and merging never panic, errors are load errors or invalid-argument
// *domain.Errors with valid UTF-8 messages, and results are valid
// documents within the limits.
func FuzzDeclarative(f *testing.F) {
	seeds := []struct{ rules, current, intent string }{
		{`[{op: add, path: /n, value: 'has(intent.by) ? intent.by : 1'}]`, `{"n":1}`, `{"by":2}`},
		{`[{op: append, path: /e, value: intent, max_items: 2}]`, `{"e":[1,2]}`, `{"x":[1,{"y":null}]}`},
		{`[{op: merge_patch, path: "", value: intent}]`, `{"a":{"b":1}}`, `{"a":{"b":null,"c":"d"}}`},
		{`[{op: set, path: /a/-, value: 'intent.l.map(x, x * 2)'}]`, `{"a":[]}`, `{"l":[1,2,3]}`},
		{`[{op: add_to_set, path: /s, key: intent.k, value: intent.v, max_items: 3}, {op: remove_from_set, path: /t, value: '1'}]`, `{"s":{"x":[1]}}`, `{"k":"x","v":2}`},
		{`[{op: require, check: 'intent.status in ["a","b"]'}, {op: max, path: /ts, value: intent.ts}, {op: min, path: /lo, value: intent.ts}]`, `{"ts":"x"}`, `{"status":"a","ts":3}`},
		{`[{op: set_if_absent, path: /c, value: 'current'}, {op: remove, path: /a/0}]`, `{"a":[1,2]}`, `{}`},
	}
	for _, s := range seeds {
		f.Add(s.rules, []byte(s.current), []byte(s.intent), false)
		f.Add(s.rules, []byte(s.current), []byte(s.intent), true)
	}
	limits := Limits{MaxDepth: 8, MaxDocumentBytes: 4096, MaxCost: 20000, MaxItems: 200}
	f.Fuzz(func(t *testing.T, rulesYAML string, current, intent []byte, asBSON bool) {
		ps, err := Parse("fuzz.yaml", []byte("profiles:\n  - name: f\n    rules: "+rulesYAML+"\n"), Options{Limits: limits})
		if err != nil {
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("load error %T: %v", err, err)
			}
			if !utf8.ValidString(err.Error()) {
				t.Fatalf("load error is not valid UTF-8")
			}
			return
		}
		p := ps[0]
		cur := domain.Document{ContentType: domain.ContentTypeJSON, Data: current}
		in := domain.Document{ContentType: domain.ContentTypeJSON, Data: intent}
		if asBSON {
			// Reuse the profile to convert the JSON inputs to BSON.
			for _, d := range []*domain.Document{&cur, &in} {
				v, err := parseJSON("x", d.Data, limits.MaxDepth)
				o, ok := v.(*object)
				if err != nil || !ok {
					return
				}
				b, err := encodeBSON(o)
				if err != nil {
					return
				}
				*d = domain.Document{ContentType: domain.ContentTypeBSON, Data: b}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, c := range []*domain.Document{&cur, nil} {
			out, err := p.Merge(ctx, ports.MergeInput{Current: c, Intent: in})
			if err != nil {
				if ctx.Err() != nil {
					t.Fatalf("the merge ran for 10 s: %v", err)
				}
				var e *domain.Error
				if !errors.As(err, &e) || e.Code != domain.CodeInvalidArgument || !utf8.ValidString(err.Error()) {
					t.Fatalf("error %T %v", err, err)
				}
				continue
			}
			if len(out.Data) > limits.MaxDocumentBytes {
				t.Fatalf("result of %d bytes", len(out.Data))
			}
			if out.ContentType == domain.ContentTypeJSON {
				if !json.Valid(out.Data) {
					t.Fatalf("result is not valid JSON: %q", out.Data)
				}
				if _, err := parseJSON("result", out.Data, limits.MaxDepth); err != nil {
					t.Fatalf("result: %v", err)
				}
			} else if _, err := parseBSON("result", out.Data, limits.MaxDepth); err != nil {
				t.Fatalf("result: %v", err)
			}
		}
	})
}
