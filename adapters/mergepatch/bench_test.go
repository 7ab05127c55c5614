package mergepatch

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/internal/bsonwire"
)

// The merge-patch benchmarks: a ~4 MiB document of ~300k members and the
// worst-case intents, each next to a baseline that only parses the same
// bytes (encoding/json into interface values; BSON validation plus a walk
// of every element). b.SetBytes is the document plus the intent, so the
// MB/s of a merge and of its baseline compare directly.
//
//	go test ./adapters/mergepatch/ -run '^$' -bench . -benchtime 3x
//
// Scenarios (benchMembers members unless said otherwise):
//   - delete-all: the intent deletes every member of a flat document.
//   - replace-all: the intent gives every member a new value.
//   - deep: the 300k members sit in an object 99 levels below the top (the
//     default limit allows 100); the intent changes one of them along the
//     same path.
//   - wide-nested: 150k members that are small objects; the intent merges
//     into each of them (removes one field, adds one).

const (
	benchMembers = 300_000
	benchDepth   = 100 // objects, counting the top level
)

type benchCase struct {
	name          string
	target, patch []byte
}

func benchKey(i int) string { return fmt.Sprintf("k%06d", i) }

// jsonMembers writes n members "k000000":v(i) separated by commas.
func jsonMembers(b *strings.Builder, n int, v func(int) string) {
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + benchKey(i) + `":` + v(i))
	}
}

func jsonFlat(n int, v func(int) string) []byte {
	var b strings.Builder
	b.WriteByte('{')
	jsonMembers(&b, n, v)
	b.WriteByte('}')
	return []byte(b.String())
}

// jsonDeep nests inner under depth-1 levels of {"a": ...}.
func jsonDeep(depth int, inner []byte) []byte {
	return []byte(strings.Repeat(`{"a":`, depth-1) + string(inner) + strings.Repeat(`}`, depth-1))
}

func small(i int) string { return fmt.Sprint(i % 100) }

func jsonCases() []benchCase {
	flat := jsonFlat(benchMembers, small)
	nested := jsonFlat(benchMembers/2, func(i int) string { return `{"v":` + small(i) + `,"w":1}` })
	return []benchCase{
		{"delete-all", flat, jsonFlat(benchMembers, func(int) string { return "null" })},
		{"replace-all", flat, jsonFlat(benchMembers, func(i int) string { return small(i + 1) })},
		{"deep", jsonDeep(benchDepth, flat), jsonDeep(benchDepth, []byte(`{"k000007":"x"}`))},
		{"wide-nested", nested, jsonFlat(benchMembers/2, func(i int) string { return `{"v":null,"x":2}` })},
	}
}

// bsonFlat builds a document of n members; v appends member i.
func bsonFlat(n int, v func(dst []byte, key string, i int) []byte) []byte {
	idx, dst := bsoncore.AppendDocumentStart(nil)
	for i := 0; i < n; i++ {
		dst = v(dst, benchKey(i), i)
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

func bsonDeep(depth int, inner []byte) []byte {
	doc := inner
	for i := 1; i < depth; i++ {
		doc = bsoncore.NewDocumentBuilder().AppendDocument("a", doc).Build()
	}
	return doc
}

func bsonCases() []benchCase {
	flat := bsonFlat(benchMembers, func(dst []byte, k string, i int) []byte { return bsoncore.AppendInt32Element(dst, k, int32(i%100)) })
	sub := bsoncore.NewDocumentBuilder().AppendInt32("v", 1).AppendInt32("w", 1).Build()
	subPatch := bsoncore.NewDocumentBuilder().AppendNull("v").AppendInt32("x", 2).Build()
	return []benchCase{
		{"delete-all", flat, bsonFlat(benchMembers, func(dst []byte, k string, _ int) []byte { return bsoncore.AppendNullElement(dst, k) })},
		{"replace-all", flat, bsonFlat(benchMembers, func(dst []byte, k string, i int) []byte { return bsoncore.AppendInt64Element(dst, k, int64(i)) })},
		{"deep", bsonDeep(benchDepth, flat), bsonDeep(benchDepth, bsoncore.NewDocumentBuilder().AppendString("k000007", "x").Build())},
		{"wide-nested", bsonFlat(benchMembers/2, func(dst []byte, k string, _ int) []byte { return bsoncore.AppendDocumentElement(dst, k, sub) }),
			bsonFlat(benchMembers/2, func(dst []byte, k string, _ int) []byte { return bsoncore.AppendDocumentElement(dst, k, subPatch) })},
	}
}

func BenchmarkMergeJSON(b *testing.B) {
	for _, c := range jsonCases() {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.target) + len(c.patch)))
			for b.Loop() {
				if _, err := MergeJSON(c.target, c.patch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMergeJSONSmall is the common case: a document of 16 members (a
// nested one among them) and an intent that changes one member, the shape
// of the contention benchmarks' merges.
func BenchmarkMergeJSONSmall(b *testing.B) {
	target := jsonFlat(16, func(i int) string {
		if i == 5 {
			return `{"v":1,"w":[1,2]}`
		}
		return small(i)
	})
	patch := []byte(`{"k000003":7,"k000005":{"v":2}}`)
	b.SetBytes(int64(len(target) + len(patch)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MergeJSON(target, patch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseJSON is the baseline of BenchmarkMergeJSON: decoding the
// document and the intent with encoding/json.
func BenchmarkParseJSON(b *testing.B) {
	for _, c := range jsonCases() {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.target) + len(c.patch)))
			for b.Loop() {
				var t, p any
				if err := json.Unmarshal(c.target, &t); err != nil {
					b.Fatal(err)
				}
				if err := json.Unmarshal(c.patch, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkMergeBSON(b *testing.B) {
	for _, c := range bsonCases() {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.target) + len(c.patch)))
			for b.Loop() {
				if _, err := MergeBSON(c.target, c.patch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// walkBSON visits every element of a validated document, all the way down,
// without allocating.
func walkBSON(doc bsoncore.Document) (n int) {
	rest := doc[4 : len(doc)-1]
	for len(rest) > 0 {
		el, r, ok := bsoncore.ReadElement(rest)
		if !ok {
			return n
		}
		rest = r
		n++
		if v := el.Value(); v.Type == bsoncore.TypeEmbeddedDocument || v.Type == bsoncore.TypeArray {
			n += walkBSON(v.Data)
		}
	}
	return n
}

// BenchmarkParseBSON is the baseline of BenchmarkMergeBSON: validating the
// document and the intent and walking their elements.
func BenchmarkParseBSON(b *testing.B) {
	for _, c := range bsonCases() {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.target) + len(c.patch)))
			for b.Loop() {
				for _, d := range [][]byte{c.target, c.patch} {
					if err := bsonwire.Validate(d); err != nil {
						b.Fatal(err)
					}
					walkBSON(d)
				}
			}
		})
	}
}

// BenchmarkDeleteScaling deletes every member of flat documents of growing
// size: a linear merge keeps its MB/s, a quadratic one loses it.
func BenchmarkDeleteScaling(b *testing.B) {
	for _, n := range []int{5_000, 10_000, 20_000} {
		target, patch := jsonFlat(n, small), jsonFlat(n, func(int) string { return "null" })
		b.Run(fmt.Sprintf("JSON/%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(target) + len(patch)))
			for b.Loop() {
				if _, err := MergeJSON(target, patch); err != nil {
					b.Fatal(err)
				}
			}
		})
		bt := bsonFlat(n, func(dst []byte, k string, i int) []byte { return bsoncore.AppendInt32Element(dst, k, int32(i%100)) })
		bp := bsonFlat(n, func(dst []byte, k string, _ int) []byte { return bsoncore.AppendNullElement(dst, k) })
		b.Run(fmt.Sprintf("BSON/%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(bt) + len(bp)))
			for b.Loop() {
				if _, err := MergeBSON(bt, bp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
