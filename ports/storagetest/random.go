package storagetest

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/sink-io/sink/domain"
)

// NewRand returns the deterministic generator the random documents and
// filters are drawn from.
func NewRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

var (
	randomNames   = []string{"a", "b", "n", "s", "é", "x"}
	randomStrings = []string{"", "a", "ab", "b", "Z", "é", "éa", "e\u0301", "日本", "a b", "~"}
)

func randomScalar(r *rand.Rand) domain.Value {
	switch r.IntN(9) {
	case 0:
		return domain.Null()
	case 1:
		return domain.BoolValue(r.IntN(2) == 0)
	case 2, 3:
		return domain.IntValue(int64(r.IntN(9) - 4))
	case 4:
		return domain.FloatValue([]float64{-1.5, 0.5, 2, 3.25, 1e10}[r.IntN(5)])
	case 5:
		return domain.IntValue([]int64{1 << 40, -(1 << 33), math.MaxInt64, 1<<53 + 1}[r.IntN(4)])
	}
	return domain.StringValue(randomStrings[r.IntN(len(randomStrings))])
}

func randomValue(r *rand.Rand, depth int) domain.Value {
	if depth < 2 {
		switch r.IntN(6) {
		case 0:
			return randomObject(r, depth+1)
		case 1:
			n := r.IntN(4)
			v := domain.Value{Kind: domain.ValueArray, Elems: []domain.Value{}}
			for range n {
				// No arrays directly inside arrays: the test FerretDB
				// cannot store them.
				e := randomValue(r, depth+1)
				for e.Kind == domain.ValueArray {
					e = randomValue(r, depth+1)
				}
				v.Elems = append(v.Elems, e)
			}
			return v
		}
	}
	return randomScalar(r)
}

func randomObject(r *rand.Rand, depth int) domain.Value {
	v := domain.Value{Kind: domain.ValueObject, Fields: []domain.Field{}}
	for _, name := range randomNames {
		if r.IntN(3) != 0 {
			v.Fields = append(v.Fields, domain.Field{Name: name, Value: randomValue(r, depth)})
		}
	}
	return v
}

// RandomDocument returns a random object: nested objects, arrays, mixed
// numeric types, missing fields, nulls, non-ASCII strings.
func RandomDocument(r *rand.Rand) domain.Value { return randomObject(r, 0) }

func randomPath(r *rand.Rand) []string {
	p := []string{randomNames[r.IntN(len(randomNames))]}
	for r.IntN(3) == 0 && len(p) < 3 {
		p = append(p, randomNames[r.IntN(len(randomNames))])
	}
	return p
}

// RandomFilter returns a random valid filter over RandomDocument's fields.
func RandomFilter(r *rand.Rand) *domain.Filter { return randomFilter(r, 0) }

func randomFilter(r *rand.Rand, depth int) *domain.Filter {
	if depth < 3 && r.IntN(3) == 0 {
		switch r.IntN(3) {
		case 0:
			return &domain.Filter{Op: domain.FilterNot, Children: []*domain.Filter{randomFilter(r, depth+1)}}
		default:
			f := &domain.Filter{Op: domain.FilterAnd}
			if r.IntN(2) == 0 {
				f.Op = domain.FilterOr
			}
			for range r.IntN(4) {
				f.Children = append(f.Children, randomFilter(r, depth+1))
			}
			return f
		}
	}
	f := &domain.Filter{Path: randomPath(r)}
	ops := []domain.FilterOp{domain.FilterEq, domain.FilterNe, domain.FilterLt, domain.FilterLte, domain.FilterGt, domain.FilterGte, domain.FilterIn, domain.FilterExists, domain.FilterPrefix}
	f.Op = ops[r.IntN(len(ops))]
	switch f.Op {
	case domain.FilterEq, domain.FilterNe:
		f.Value = randomScalar(r)
	case domain.FilterLt, domain.FilterLte, domain.FilterGt, domain.FilterGte:
		for f.Value = randomScalar(r); f.Value.Kind != domain.ValueNumber && f.Value.Kind != domain.ValueString; f.Value = randomScalar(r) {
		}
	case domain.FilterIn:
		for range 1 + r.IntN(3) {
			f.Values = append(f.Values, randomScalar(r))
		}
	case domain.FilterExists:
		f.Exists = r.IntN(2) == 0
	case domain.FilterPrefix:
		f.Value = domain.StringValue(randomStrings[r.IntN(len(randomStrings))])
		if len(f.Value.Str) > 1 && r.IntN(2) == 0 {
			f.Value.Str = f.Value.Str[:1]
		}
		if !isUTF8(f.Value.Str) {
			f.Value.Str = "a"
		}
	}
	return f
}

func isUTF8(s string) bool { return strings.ToValidUTF8(s, "") == s }

// FormatFilter renders a filter for test messages.
func FormatFilter(f *domain.Filter) string {
	switch f.Op {
	case domain.FilterAnd, domain.FilterOr, domain.FilterNot:
		parts := make([]string, len(f.Children))
		for i, c := range f.Children {
			parts[i] = FormatFilter(c)
		}
		return f.Op.String() + "(" + strings.Join(parts, ", ") + ")"
	case domain.FilterExists:
		return fmt.Sprintf("exists(%s, %v)", domain.PathString(f.Path), f.Exists)
	case domain.FilterIn:
		parts := make([]string, len(f.Values))
		for i := range f.Values {
			parts[i] = FormatValue(f.Values[i])
		}
		return fmt.Sprintf("in(%s, [%s])", domain.PathString(f.Path), strings.Join(parts, ", "))
	}
	return fmt.Sprintf("%s(%s, %s)", f.Op, domain.PathString(f.Path), FormatValue(f.Value))
}

// FormatValue renders a value as JSON (numbers that are doubles with a
// trailing ".0" marker when integral).
func FormatValue(v domain.Value) string { return string(AppendJSON(nil, v, true)) }

// AppendJSON appends v as JSON. With markFloats, integral doubles get a
// ".0" so that messages show the type.
func AppendJSON(b []byte, v domain.Value, markFloats bool) []byte {
	switch v.Kind {
	case domain.ValueNull:
		return append(b, "null"...)
	case domain.ValueBool:
		return strconv.AppendBool(b, v.Bool)
	case domain.ValueNumber:
		if !v.IsFloat {
			return strconv.AppendInt(b, v.Int, 10)
		}
		s := strconv.FormatFloat(v.Float, 'g', -1, 64)
		if markFloats && !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		return append(b, s...)
	case domain.ValueString:
		return strconv.AppendQuote(b, v.Str)
	case domain.ValueArray:
		b = append(b, '[')
		for i, e := range v.Elems {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendJSON(b, e, markFloats)
		}
		return append(b, ']')
	case domain.ValueObject:
		b = append(b, '{')
		for i, f := range v.Fields {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, f.Name)
			b = append(b, ':')
			b = AppendJSON(b, f.Value, markFloats)
		}
		return append(b, '}')
	}
	return append(b, "null"...)
}

// EncodeJSON is a ScanFixtures.Encode for storages that hold JSON.
func EncodeJSON(_ testing.TB, v domain.Value) domain.Document {
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: AppendJSON(nil, v, false)}
}

// EncodeBSON is a ScanFixtures.Encode for storages that hold BSON. Even
// integers that fit are int32, odd ones int64 (mixed numeric types).
func EncodeBSON(_ testing.TB, v domain.Value) domain.Document {
	return domain.Document{ContentType: domain.ContentTypeBSON, Data: appendBSONDoc(nil, v)}
}

func appendBSONDoc(b []byte, v domain.Value) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	if v.Kind == domain.ValueArray {
		for i, e := range v.Elems {
			b = appendBSONElem(b, strconv.Itoa(i), e)
		}
	} else {
		for _, f := range v.Fields {
			b = appendBSONElem(b, f.Name, f.Value)
		}
	}
	b = append(b, 0)
	binary.LittleEndian.PutUint32(b[start:], uint32(len(b)-start))
	return b
}

func appendBSONElem(b []byte, name string, v domain.Value) []byte {
	typ := func(t byte) { b = append(append(append(b, t), name...), 0) }
	switch v.Kind {
	case domain.ValueNull:
		typ(0x0A)
	case domain.ValueBool:
		typ(0x08)
		if v.Bool {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	case domain.ValueNumber:
		switch {
		case v.IsFloat:
			typ(0x01)
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v.Float))
		case v.Int%2 == 0 && v.Int >= math.MinInt32 && v.Int <= math.MaxInt32:
			typ(0x10)
			b = binary.LittleEndian.AppendUint32(b, uint32(int32(v.Int)))
		default:
			typ(0x12)
			b = binary.LittleEndian.AppendUint64(b, uint64(v.Int))
		}
	case domain.ValueString:
		typ(0x02)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v.Str)+1))
		b = append(append(b, v.Str...), 0)
	case domain.ValueObject:
		typ(0x03)
		b = appendBSONDoc(b, v)
	case domain.ValueArray:
		typ(0x04)
		b = appendBSONDoc(b, v)
	default:
		typ(0x0A)
	}
	return b
}
