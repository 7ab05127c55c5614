package declarative

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

func compileWith(t *testing.T, l Limits, body string) *Profile {
	t.Helper()
	ps, err := Parse("test.yaml", []byte("profiles:\n  - name: t\n"+body), Options{Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

func list(n int) string {
	var b strings.Builder
	b.WriteString("[")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("1")
	}
	b.WriteString("]")
	return b.String()
}

func TestLimits(t *testing.T) {
	cases := []struct {
		name    string
		limits  Limits
		rules   []string
		current string
		intent  string
		wantErr string
	}{
		{name: "cost of one expression", limits: Limits{MaxCost: 1000}, rules: []string{`{op: set, path: /a, value: 'intent.l.map(x, intent.l.map(y, x + y))'}`},
			intent: `{"l":` + list(100) + `}`, wantErr: "exceed the cost limit"},
		{name: "cost adds up over the merge", limits: Limits{MaxCost: 400}, rules: []string{
			`{op: set, path: /a, value: 'intent.l.map(x, x + 1)'}`, `{op: set, path: /b, value: 'intent.l.map(x, x + 1)'}`},
			intent: `{"l":` + list(20) + `}`, wantErr: "rules[1] (set /b): value: the expressions of this merge exceed the cost limit"},
		{name: "intent depth", limits: Limits{MaxDepth: 2}, rules: []string{`{op: set, path: /a, value: '1'}`}, intent: `{"a":{"b":{"c":{}}}}`, wantErr: "intent: nested deeper than 2 levels"},
		{name: "current depth", limits: Limits{MaxDepth: 2}, rules: []string{`{op: set, path: /a, value: '1'}`}, current: `{"a":[[[1]]]}`, intent: `{}`, wantErr: "current document: nested deeper than 2 levels"},
		{name: "value depth", limits: Limits{MaxDepth: 2}, rules: []string{`{op: set, path: /a, value: '[[[[1]]]]'}`}, intent: `{}`, wantErr: "value: the value is nested deeper than 2 levels"},
		{name: "result depth", limits: Limits{MaxDepth: 2}, rules: []string{`{op: set, path: /a/b, value: '[[1]]'}`}, intent: `{}`, wantErr: "result: nested deeper than 2 levels"},
		{name: "result size", limits: Limits{MaxDocumentBytes: 64}, rules: []string{`{op: set, path: /a, value: 'intent.s + intent.s'}`}, intent: `{"s":"` + strings.Repeat("x", 40) + `"}`, wantErr: "result: 88 bytes, more than the limit of 64"},
		{name: "value items", limits: Limits{MaxItems: 10}, rules: []string{`{op: set, path: /a, value: 'intent.l'}`}, intent: `{"l":` + list(20) + `}`, wantErr: "the value has more than 10 items"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := compileWith(t, c.limits, rules(c.rules...))
			var cur *domain.Document
			if c.current != "" {
				d := jsonDoc(c.current)
				cur = &d
			}
			got, err := merge(p, cur, jsonDoc(c.intent))
			if err == nil || domain.CodeOf(err) != domain.CodeInvalidArgument || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("got %s, %v; want invalid argument with %q", got.Data, err, c.wantErr)
			}
			// Within the limits by one step, the same merge succeeds
			// with the default limits.
			p = compile(t, rules(c.rules...))
			if _, err := merge(p, cur, jsonDoc(c.intent)); err != nil {
				t.Fatalf("with default limits: %v", err)
			}
		})
	}
}

func TestCancellation(t *testing.T) {
	p := compile(t, rules(`{op: set, path: /a, value: '1'}`))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Merge(ctx, ports.MergeInput{Intent: jsonDoc(`{}`)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
	// A long evaluation stops at the deadline.
	p = compileWith(t, Limits{MaxCost: 1 << 62, MaxItems: 1 << 30}, rules(`{op: set, path: /a, value: 'intent.l.map(x, intent.l.map(y, x + y)).size()'}`))
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.Merge(ctx, ports.MergeInput{Intent: jsonDoc(`{"l":` + list(5000) + `}`)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the merge took %v after its deadline", d)
	}
}

// TestErrorsDoNotQuoteDocuments: error messages name paths and types, not
// the client's values.
func TestErrorsDoNotQuoteDocuments(t *testing.T) {
	const secret = "s3cr3t-value"
	p := compile(t, rules(`{op: add, path: /n, value: intent.by}`, `{op: append, path: /e, value: intent.by, max_items: 1, drop: error}`,
		`{op: set, path: /x, value: 'int(intent.s)', when: has(intent.s)}`, `{op: set, path: /y, value: 'intent.m[intent.k]', when: has(intent.k)}`,
		`{op: set, path: /z, value: 'intent.l[intent.i]', when: has(intent.i)}`))
	cur := jsonDoc(`{"n":"` + secret + `"}`)
	for _, tc := range []struct {
		cur    *domain.Document
		intent string
	}{
		{&cur, `{"by":1}`},
		{nil, `{"by":"` + secret + `"}`},
		{nil, `{"by":` + secret + `}`},
		{nil, `{"` + secret + `"}`},
		{nil, `{"by":1,"s":"` + secret + `"}`},
		{nil, `{"by":1,"m":{},"k":"` + secret + `"}`},
		{nil, `{"by":1,"l":[],"i":12345}`},
	} {
		_, err := merge(p, tc.cur, jsonDoc(tc.intent))
		if err == nil || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "12345") {
			t.Fatalf("error %v quotes the document", err)
		}
	}
}
