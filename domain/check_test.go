package domain_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sink-io/sink/domain"
)

func TestFormatOf(t *testing.T) {
	for ct, want := range map[string]domain.DocumentFormat{
		"application/json":                domain.FormatJSON,
		"Application/JSON; charset=utf-8": domain.FormatJSON,
		"application/ld+json":             domain.FormatJSON,
		"application/vnd.x+json; v=1":     domain.FormatJSON,
		"application/bson":                domain.FormatBSON,
		"text/plain":                      domain.FormatOpaque,
		"application/octet-stream":        domain.FormatOpaque,
		"application/jsonx":               domain.FormatOpaque,
		"not a type":                      domain.FormatOpaque,
	} {
		if got := domain.FormatOf(ct); got != want {
			t.Errorf("FormatOf(%q) = %d, want %d", ct, got, want)
		}
	}
}

// nestedJSON returns levels of {"a": ...} around inner.
func nestedJSON(levels int, inner string) []byte {
	return []byte(strings.Repeat(`{"a":`, levels) + inner + strings.Repeat(`}`, levels))
}

// nestedBSON returns a document of depth levels of {"": {...}} around an
// empty document.
func nestedBSON(depth int) []byte {
	n := 5 + 7*depth
	b := make([]byte, n)
	for i := 0; i < depth; i++ {
		start := 6 * i
		binary.LittleEndian.PutUint32(b[start:], uint32(n-start-i))
		b[start+4] = 0x03
	}
	binary.LittleEndian.PutUint32(b[6*depth:], 5)
	return b
}

func TestCheckDocument(t *testing.T) {
	json := func(s string) domain.Document {
		return domain.Document{ContentType: "application/json", Data: []byte(s)}
	}
	ok := []domain.Document{
		json(`{"a":1}`), json(` [1, "x\"[", {"b": null}] `), json(`42`), json(`"s"`),
		json(string(nestedJSON(5, "[]"))), // depth 5 of 5
		{ContentType: "application/problem+json", Data: []byte(`{}`)},
		{ContentType: "application/bson", Data: nestedBSON(5)},
		{ContentType: "text/plain", Data: []byte(`{"a":`)},
		{ContentType: "application/octet-stream", Data: []byte{0xff, 0}},
	}
	for _, d := range ok {
		if err := domain.CheckDocument(d, 5); err != nil {
			t.Errorf("%s %q: %v", d.ContentType, d.Data, err)
		}
	}
	bad := []struct {
		doc  domain.Document
		want string
		deep bool
	}{
		{json(`{"a":`), "is not valid JSON: it ends before the value is complete (byte 5 (line 1, column 6))", false},
		{json(""), "is not valid JSON: the document is empty", false},
		{json("{\n  \"a\": x}"), "is not valid JSON: syntax error at byte 9 (line 2, column 8)", false},
		{json(`{"a":1} {}`), "is not valid JSON: syntax error at byte 8 (line 1, column 9)", false},
		{json("\"\xff\""), "is not valid JSON: invalid UTF-8 at byte 1 (line 1, column 2)", false},
		{json(string(nestedJSON(7, "1"))), "is not valid JSON: documents and arrays are nested more than 5 levels deep (byte 30 (line 1, column 31))", true},
		{domain.Document{ContentType: "application/x+json", Data: []byte("{")}, "is not valid JSON", false},
		{domain.Document{ContentType: "application/bson", Data: []byte(`{"a":1}`)}, "is not valid BSON: document length", false},
		{domain.Document{ContentType: "application/bson", Data: nestedBSON(6)}, "is not valid BSON: element 0.0.0.0.0.0: documents and arrays are nested more than 5 levels deep", true},
	}
	for _, c := range bad {
		err := domain.CheckDocument(c.doc, 5)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s %q: %v, want %q", c.doc.ContentType, c.doc.Data, err, c.want)
			continue
		}
		if errors.Is(err, domain.ErrTooDeep) != c.deep {
			t.Errorf("%q: errors.Is(ErrTooDeep) = %v", c.doc.Data, !c.deep)
		}
	}
}

// The depth scan stops at the first level too deep, and a document nested
// beyond encoding/json's own limit is reported as too deep, not as a
// syntax error.
func TestCheckJSONDepthLimits(t *testing.T) {
	if err := domain.CheckJSON(nestedJSON(domain.MaxNestingLimit+5, "1"), domain.MaxNestingLimit); !errors.Is(err, domain.ErrTooDeep) {
		t.Fatalf("beyond the largest limit: %v", err)
	}
	if err := domain.CheckJSON([]byte(strings.Repeat("[", 1<<20)), 100); !errors.Is(err, domain.ErrTooDeep) || !strings.Contains(err.Error(), "byte 101 ") {
		t.Fatalf("a deep unterminated document: %v", err)
	}
}

// TestCheckJSONLongStrings: a special byte (the closing quote, an escape,
// a control character, a multi-byte or an invalid UTF-8 sequence) at every
// offset of a long string, so in every lane of the word-at-a-time scans
// (eight and 32 bytes), gets the same verdict as encoding/json with
// UTF-8 validation.
func TestCheckJSONLongStrings(t *testing.T) {
	specials := []string{`"`, `\n`, `\u00e9`, `\x`, "\x01", "\x1f", "é", "€", "\xff", "\xc3", `\`}
	for _, sp := range specials {
		for at := 0; at < 100; at++ {
			for _, tail := range []string{`"}`, `","b":1}`, ``} {
				doc := []byte(`{"a":"` + strings.Repeat("x", at) + sp + strings.Repeat("y", 100-at) + tail)
				want := json.Valid(doc) && utf8.Valid(doc)
				if err := domain.CheckJSON(doc, 10); (err == nil) != want {
					t.Fatalf("special %q at %d, tail %q: CheckJSON %v, encoding/json valid %v", sp, at, tail, err, want)
				}
			}
		}
	}
}

// TestSpecialBitsLowestByte: the word test of string bytes reports none
// for a word of plain bytes, and its lowest byte reported is the word's
// first special one (a string's first word goes straight there), for
// every byte value in every lane, below it plain bytes and above it any.
func TestSpecialBitsLowestByte(t *testing.T) {
	plain := func(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }
	r := rand.New(rand.NewPCG(1, 2))
	var w [8]byte
	for lane := 0; lane < 8; lane++ {
		for c := 0; c < 256; c++ {
			for range 64 {
				for k := range w {
					switch {
					case k < lane:
						w[k] = byte(0x20 + r.IntN(0x60))
						for !plain(w[k]) {
							w[k] = byte(0x20 + r.IntN(0x60))
						}
					case k == lane:
						w[k] = byte(c)
					default:
						w[k] = byte(r.IntN(256))
					}
				}
				first := 8
				for k := range w {
					if !plain(w[k]) {
						first = k
						break
					}
				}
				got := domain.SpecialBitsForTest(binary.LittleEndian.Uint64(w[:]))
				if lowest := bits.TrailingZeros64(got) / 8; lowest != first {
					t.Fatalf("word % x: lowest byte reported %d, first special byte %d (bits %#x)", w, lowest, first, got)
				}
			}
		}
	}
}

// TestPlainPrefix holds the bulk skip of string bytes to its contract:
// every byte value at every offset of runs of every length up to 80 (so
// in every lane of a block, and in the tail after the last whole block),
// in a buffer whose bytes past the run are plain (a read past the end
// would skip more than the run): the bytes skipped are plain, and the
// skip stops at the first byte that is not, or less than a block before
// it (or before the end).
func TestPlainPrefix(t *testing.T) {
	plain := func(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }
	buf := make([]byte, 128)
	for n := 0; n <= 80; n++ {
		for at := 0; at <= n; at++ { // at == n: no special byte
			for c := 0; c < 256; c++ {
				if at == n && c > 0 {
					break
				}
				for i := range buf {
					buf[i] = 'z'
				}
				for i := range n {
					buf[i] = 'a' + byte(i%26)
				}
				first := n
				if at < n {
					buf[at] = byte(c)
					if !plain(byte(c)) {
						first = at
					}
				}
				k := domain.PlainPrefixForTest(buf[:n])
				if k < 0 || k > first || first-k >= domain.PlainBlockForTest {
					t.Fatalf("run of %d, byte %#x at %d: skipped %d, the first byte that is not plain is at %d (block %d)", n, c, at, k, first, domain.PlainBlockForTest)
				}
			}
		}
	}
}

// BenchmarkCheckDocumentJSON1KB is the check every 1 KB JSON put pays.
func BenchmarkCheckDocumentJSON1KB(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"customer":"Ada Lovelace","items":[`)
	for i := 0; sb.Len() < 1000; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"sku":"notebook-` + strings.Repeat("x", i%7) + `","qty":3,"price":12.5}`)
	}
	sb.WriteString(`],"paid":true}`)
	d := domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(sb.String())}
	b.SetBytes(int64(len(d.Data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := domain.CheckDocument(d, 100); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckDocumentJSON1KBString: a 1 KB JSON document that is one
// long string, the document of the single-operation benchmarks.
func BenchmarkCheckDocumentJSON1KBString(b *testing.B) {
	d := domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"payload":"` + strings.Repeat("x", 1000) + `"}`)}
	b.SetBytes(int64(len(d.Data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := domain.CheckDocument(d, 100); err != nil {
			b.Fatal(err)
		}
	}
}

// CheckJSON accepts exactly what encoding/json accepts with valid UTF-8,
// and rejects as too deep exactly the valid documents nested deeper than
// the limit.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, ` {"a" : [1, -2.5e+3, true, false, null, "x\u00e9\"\\/"] } `, `{"a":`, `[1,]`, `{"a":1,}`, `01`, `1.`, `-`, `"\ud800"`, "\"\xff\"", `{"a":{"b":[[{}]]}}`, `[[[[]]]]`, `tru`, `nul`, `"\u12"`, "\"a\tb\"", `{"a" 1}`, `[1 2]`, `1e`, `1E+`, `-0.0e-0`, ``, ` `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		valid := json.Valid(b) && utf8.Valid(b)
		if err := domain.CheckJSON(b, domain.MaxNestingLimit); (err == nil) != valid {
			t.Fatalf("%q: CheckJSON %v, encoding/json valid %v", b, err, valid)
		}
		if !valid {
			return
		}
		deepest, depth, inString := -1, -1, false
		for i := 0; i < len(b); i++ {
			switch c := b[i]; {
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
		for _, limit := range []int{1, 2, 3} {
			err := domain.CheckJSON(b, limit)
			if (deepest > limit) != errors.Is(err, domain.ErrTooDeep) || (err != nil) != (deepest > limit) {
				t.Fatalf("%q (depth %d) with limit %d: %v", b, deepest, limit, err)
			}
		}
	})
}
