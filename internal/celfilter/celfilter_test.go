package celfilter_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/celfilter"
)

func TestCompileMatchesTheTree(t *testing.T) {
	doc, err := domain.DecodeJSON([]byte(`{"total": 12, "status": "paid", "a b": {"c": [1, 2]}, "tags": ["x", "y"], "n": null}`))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]bool{
		`doc.total > 10 && doc.status == "paid"`:         true,
		`doc.total > 12 || doc.status != "paid"`:         false,
		`10 < doc.total`:                                 true,
		`doc.total >= 12.0`:                              true,
		`doc["a b"].c == 2`:                              true,
		`doc.tags in ["y", 3]`:                           true,
		`has(doc.n) && doc.n == null`:                    true,
		`!has(doc.missing) && doc.missing == null`:       true,
		`doc.status.startsWith("pa")`:                    true,
		`doc.total == "12"`:                              false,
		`!(doc.total < 0) && (doc.tags == "x" || false)`: true,
		`true`:             true,
		`doc.total == -12`: false,
	}
	for src, want := range cases {
		f, err := celfilter.Compile(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got := f.Match(&doc); got != want {
			t.Errorf("%s: %v, want %v", src, got, want)
		}
	}
}

func TestCompileRejectsWithPosition(t *testing.T) {
	cases := map[string]string{
		`doc.total > 10 && size(doc.items) > 2`:      "1:23",
		`doc.total + 1 > 2`:                          "1:11",
		`doc.a > null`:                               "1:9",
		"doc.a == 1 &&\n  other.b == 2":              "2:3",
		`doc.a ==`:                                   "1:",
		`doc.a[0] == 1`:                              "1:7",
		`doc.a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q == 1`: "1:1",
		``: "1:1",
	}
	for src, pos := range cases {
		_, err := celfilter.Compile(src)
		var ce *celfilter.Error
		if !errors.As(err, &ce) {
			t.Fatalf("%q: error %v, want a positioned error", src, err)
		}
		if !strings.HasPrefix(err.Error(), pos) {
			t.Errorf("%q: %v, want position %s", src, err, pos)
		}
	}
}

// FuzzCompile: any input compiles to a valid tree or fails with a
// positioned error; it never panics.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{`doc.a > 1 && doc.b == "x"`, `has(doc.a) || !(doc.c in [1, null])`, `doc["x"].startsWith("é")`, `1 < doc.a`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		tree, err := celfilter.Compile(src)
		if err != nil {
			var ce *celfilter.Error
			if !errors.As(err, &ce) || ce.Line < 1 || ce.Column < 1 {
				t.Fatalf("%q: error without a position: %v", src, err)
			}
			return
		}
		if verr := domain.ValidateFilter(tree, "filter"); verr != nil {
			t.Fatalf("%q compiled to an invalid tree: %v", src, verr)
		}
	})
}
