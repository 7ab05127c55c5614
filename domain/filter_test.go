package domain_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sink-io/sink/domain"
)

func leaf(op domain.FilterOp, path string, v domain.Value) *domain.Filter {
	return &domain.Filter{Op: op, Path: strings.Split(path, "."), Value: v}
}

func TestFilterSemantics(t *testing.T) {
	doc, err := domain.DecodeJSON([]byte(`{"n": 3, "f": 2.5, "s": "héllo", "z": null, "b": true,
		"arr": [1, "x", {"k": 7}], "objs": [{"k": 1}, {"k": [5, 6]}, {"j": 2}], "o": {"p": {"q": "deep"}}, "big": 9007199254740993}`))
	if err != nil {
		t.Fatal(err)
	}
	in := func(path string, vs ...domain.Value) *domain.Filter {
		return &domain.Filter{Op: domain.FilterIn, Path: strings.Split(path, "."), Values: vs}
	}
	exists := func(path string, e bool) *domain.Filter {
		return &domain.Filter{Op: domain.FilterExists, Path: strings.Split(path, "."), Exists: e}
	}
	cases := []struct {
		name string
		f    *domain.Filter
		want bool
	}{
		{"int eq double", leaf(domain.FilterEq, "n", domain.FloatValue(3)), true},
		{"double eq int", leaf(domain.FilterEq, "f", domain.IntValue(2)), false},
		{"number never equals string", leaf(domain.FilterEq, "n", domain.StringValue("3")), false},
		{"number not less than string", leaf(domain.FilterLt, "n", domain.StringValue("a")), false},
		{"gt numeric across types", leaf(domain.FilterGt, "f", domain.IntValue(2)), true},
		{"exact int64 vs double", leaf(domain.FilterGt, "big", domain.FloatValue(9007199254740992)), true},
		{"string bytes order", leaf(domain.FilterGt, "s", domain.StringValue("hz")), true},
		{"prefix non-ascii", leaf(domain.FilterPrefix, "s", domain.StringValue("hé")), true},
		{"prefix no", leaf(domain.FilterPrefix, "s", domain.StringValue("he")), false},
		{"null eq null", leaf(domain.FilterEq, "z", domain.Null()), true},
		{"null eq missing", leaf(domain.FilterEq, "nope", domain.Null()), true},
		{"null ne present", leaf(domain.FilterNe, "n", domain.Null()), true},
		{"ne missing", leaf(domain.FilterNe, "nope", domain.IntValue(1)), true},
		{"exists null", exists("z", true), true},
		{"exists missing", exists("nope", false), true},
		{"array some element", leaf(domain.FilterEq, "arr", domain.StringValue("x")), true},
		{"array element range", leaf(domain.FilterGte, "arr", domain.IntValue(1)), true},
		{"array of objects path", leaf(domain.FilterEq, "objs.k", domain.IntValue(6)), true},
		{"array in object in array", leaf(domain.FilterEq, "arr.k", domain.IntValue(7)), true},
		{"array objects exists", exists("objs.j", true), true},
		{"nested", leaf(domain.FilterEq, "o.p.q", domain.StringValue("deep")), true},
		{"bool bracket", leaf(domain.FilterEq, "b", domain.IntValue(1)), false},
		{"bool eq", leaf(domain.FilterEq, "b", domain.BoolValue(true)), true},
		{"in", in("n", domain.StringValue("3"), domain.IntValue(3)), true},
		{"in null missing", in("nope", domain.Null()), true},
		{"in none", in("n", domain.IntValue(4)), false},
		{"and", &domain.Filter{Op: domain.FilterAnd, Children: []*domain.Filter{leaf(domain.FilterEq, "n", domain.IntValue(3)), leaf(domain.FilterEq, "b", domain.BoolValue(false))}}, false},
		{"or", &domain.Filter{Op: domain.FilterOr, Children: []*domain.Filter{leaf(domain.FilterEq, "n", domain.IntValue(4)), leaf(domain.FilterEq, "b", domain.BoolValue(true))}}, true},
		{"not", &domain.Filter{Op: domain.FilterNot, Children: []*domain.Filter{leaf(domain.FilterEq, "n", domain.IntValue(3))}}, false},
		{"empty and", &domain.Filter{Op: domain.FilterAnd}, true},
		{"empty or", &domain.Filter{Op: domain.FilterOr}, false},
	}
	for _, c := range cases {
		if err := domain.ValidateFilter(c.f, "filter"); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := c.f.Match(&doc); got != c.want {
			t.Errorf("%s: Match = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestFilterBSONMatchesJSON(t *testing.T) {
	// {"a": int32 5, "b": double 5.0, "c": int64 5}
	b := []byte{0, 0, 0, 0,
		0x10, 'a', 0, 5, 0, 0, 0,
		0x01, 'b', 0, 0, 0, 0, 0, 0, 0, 0x14, 0x40,
		0x12, 'c', 0, 5, 0, 0, 0, 0, 0, 0, 0,
		0}
	b[0] = byte(len(b))
	v, err := domain.DecodeDocument(domain.Document{ContentType: domain.ContentTypeBSON, Data: b})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b", "c"} {
		if !leaf(domain.FilterEq, p, domain.IntValue(5)).Match(&v) {
			t.Errorf("%s does not equal 5", p)
		}
	}
}

func TestValidateFilterNamesNode(t *testing.T) {
	bad := &domain.Filter{Op: domain.FilterAnd, Children: []*domain.Filter{
		leaf(domain.FilterEq, "a", domain.IntValue(1)),
		{Op: domain.FilterNot, Children: []*domain.Filter{leaf(domain.FilterLt, "b", domain.Null())}},
	}}
	err := domain.ValidateFilter(bad, "filter")
	if err == nil || err.Node != "filter.and[1].not.lt" {
		t.Fatalf("error %v, want one naming filter.and[1].not.lt", err)
	}
	deep := leaf(domain.FilterEq, "a", domain.IntValue(1))
	for range domain.MaxFilterDepth + 1 {
		deep = &domain.Filter{Op: domain.FilterNot, Children: []*domain.Filter{deep}}
	}
	if err := domain.ValidateFilter(deep, "filter"); err == nil || !strings.Contains(err.Message, "nested") {
		t.Fatalf("deep filter: %v", err)
	}
	wide := &domain.Filter{Op: domain.FilterOr}
	for range domain.MaxFilterNodes {
		wide.Children = append(wide.Children, leaf(domain.FilterEq, "a", domain.IntValue(1)))
	}
	if err := domain.ValidateFilter(wide, "filter"); err == nil || !strings.Contains(err.Message, "nodes") {
		t.Fatalf("wide filter: %v", err)
	}
	for _, p := range []string{"a.0", "$a", "a..b"} {
		if err := domain.ValidateFilter(leaf(domain.FilterEq, p, domain.IntValue(1)), "filter"); err == nil {
			t.Errorf("path %q accepted", p)
		}
	}
}

func TestCompareKeysTotalOrder(t *testing.T) {
	oid := func(b byte) domain.Key { return domain.ObjectIDKey([]byte{b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}) }
	want := []domain.Key{
		domain.Int64Key(-5), domain.Int64Key(0), domain.Int64Key(1 << 40),
		domain.StringKey(""), domain.StringKey("Z"), domain.StringKey("a"), domain.StringKey("é"),
		domain.BytesKey([]byte{0xff}), domain.BytesKey([]byte{0, 0}), domain.BytesKey([]byte{0, 1}),
		oid(0), oid(9),
	}
	got := slices.Clone(want)
	slices.Reverse(got)
	slices.SortFunc(got, domain.CompareKeys)
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Fatalf("position %d: %v, want %v", i, got[i], want[i])
		}
	}
}

func TestCursorBinding(t *testing.T) {
	p := "a"
	spec := domain.ScanSpec{Dataset: domain.DatasetRef{Store: "s", Namespace: "n", Dataset: "d"}, Range: domain.KeyRange{Prefix: &p},
		Filter: leaf(domain.FilterEq, "x", domain.IntValue(1))}
	c := domain.EncodeCursor(&spec, domain.StringKey("ab"))
	k, err := domain.DecodeCursor(&spec, c, 1024)
	if err != nil || !k.Equal(domain.StringKey("ab")) {
		t.Fatalf("DecodeCursor = %v, %v", k, err)
	}
	for name, change := range map[string]func(s *domain.ScanSpec){
		"dataset":    func(s *domain.ScanSpec) { s.Dataset.Dataset = "other" },
		"filter":     func(s *domain.ScanSpec) { s.Filter = leaf(domain.FilterEq, "x", domain.IntValue(2)) },
		"order":      func(s *domain.ScanSpec) { s.Descending = true },
		"projection": func(s *domain.ScanSpec) { s.Projection = domain.Projection{Fields: []string{"x"}} },
		"range":      func(s *domain.ScanSpec) { q := "b"; s.Range.Prefix = &q },
	} {
		other := spec
		change(&other)
		if _, err := domain.DecodeCursor(&other, c, 1024); !errors.Is(err, domain.ErrCursorMismatch) {
			t.Errorf("%s changed: %v, want ErrCursorMismatch", name, err)
		}
	}
	// A cursor forged with the right binding but a key outside the range.
	forged := domain.EncodeCursor(&spec, domain.StringKey("zz"))
	if _, err := domain.DecodeCursor(&spec, forged, 1024); !errors.Is(err, domain.ErrCursorMismatch) {
		t.Errorf("forged key outside the range: %v", err)
	}
	if _, err := domain.DecodeCursor(&spec, append(c, 0), 1024); !errors.Is(err, domain.ErrCursorMalformed) {
		t.Errorf("trailing byte: %v", err)
	}
}

func TestProjection(t *testing.T) {
	d := domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"a":1,"b":{"c":2},"d":"x"}`)}
	got, err := domain.Projection{Fields: []string{"b", "d"}}.Project(d)
	if err != nil || string(got.Data) != `{"b":{"c":2},"d":"x"}` {
		t.Fatalf("include: %s %v", got.Data, err)
	}
	got, err = domain.Projection{Fields: []string{"b"}, Exclude: true}.Project(d)
	if err != nil || string(got.Data) != `{"a":1,"d":"x"}` {
		t.Fatalf("exclude: %s %v", got.Data, err)
	}
}
