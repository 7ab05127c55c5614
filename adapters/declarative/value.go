package declarative

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// The document model the rules work on, the same for JSON and BSON:
//
//	*object        an object, keys in document order
//	[]any          an array
//	string, bool, nil
//	int32, int64   integers (BSON keeps its type; JSON integers are int64)
//	float64        doubles
//	jsonNumber     a JSON number as written, until a rule computes with it
//	bson.RawValue  any other BSON value (ObjectId, date, binary, ...), kept as is
type object struct {
	keys []string
	vals map[string]any
}

type jsonNumber string

func newObject(n int) *object {
	return &object{keys: make([]string, 0, n), vals: make(map[string]any, n)}
}

func (o *object) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

func (o *object) set(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

func (o *object) remove(k string) {
	if _, ok := o.vals[k]; !ok {
		return
	}
	delete(o.vals, k)
	for i, kk := range o.keys {
		if kk == k {
			o.keys = append(o.keys[:i:i], o.keys[i+1:]...)
			break
		}
	}
}

// deepCopy copies the containers of v (scalars are immutable).
func deepCopy(v any) any {
	switch x := v.(type) {
	case *object:
		o := &object{keys: append([]string(nil), x.keys...), vals: make(map[string]any, len(x.vals))}
		for k, vv := range x.vals {
			o.vals[k] = deepCopy(vv)
		}
		return o
	case []any:
		a := make([]any, len(x))
		for i, vv := range x {
			a[i] = deepCopy(vv)
		}
		return a
	}
	return v
}

// errInput is an error in a client's document or intent, or in what the
// rules make of them: it becomes an invalid-argument error.
type errInput struct{ msg string }

func (e *errInput) Error() string { return e.msg }

func inputErrorf(format string, args ...any) error {
	return &errInput{msg: fmt.Sprintf(format, args...)}
}

// ---- JSON ----

type jsonParser struct {
	b        []byte
	maxDepth int
	what     string
}

// parseJSON parses one JSON value with nesting at most maxDepth below the
// top level.
func parseJSON(what string, b []byte, maxDepth int) (any, error) {
	p := &jsonParser{b: b, maxDepth: maxDepth, what: what}
	i := p.ws(0)
	v, i, err := p.value(i, 0)
	if err != nil {
		return nil, err
	}
	if i = p.ws(i); i != len(b) {
		return nil, p.errAt(i, "unexpected data after the value")
	}
	return v, nil
}

func (p *jsonParser) errAt(i int, msg string) error {
	return inputErrorf("%s: not valid JSON at byte %d: %s", p.what, i, msg)
}

func (p *jsonParser) ws(i int) int {
	for i < len(p.b) && (p.b[i] == ' ' || p.b[i] == '\t' || p.b[i] == '\n' || p.b[i] == '\r') {
		i++
	}
	return i
}

func (p *jsonParser) value(i, depth int) (any, int, error) {
	if i >= len(p.b) {
		return nil, i, p.errAt(i, "unexpected end")
	}
	switch c := p.b[i]; {
	case c == '{':
		if depth+1 > p.maxDepth+1 {
			return nil, i, inputErrorf("%s: nested deeper than %d levels", p.what, p.maxDepth)
		}
		o := newObject(4)
		i = p.ws(i + 1)
		if i < len(p.b) && p.b[i] == '}' {
			return o, i + 1, nil
		}
		for {
			if i >= len(p.b) || p.b[i] != '"' {
				return nil, i, p.errAt(i, "expected a string key")
			}
			k, j, err := p.str(i)
			if err != nil {
				return nil, i, err
			}
			i = p.ws(j)
			if i >= len(p.b) || p.b[i] != ':' {
				return nil, i, p.errAt(i, "expected ':'")
			}
			v, j2, err := p.value(p.ws(i+1), depth+1)
			if err != nil {
				return nil, j2, err
			}
			if _, dup := o.vals[k]; dup {
				return nil, i, p.errAt(i, "duplicate object key")
			}
			o.set(k, v)
			i = p.ws(j2)
			if i < len(p.b) && p.b[i] == ',' {
				i = p.ws(i + 1)
				continue
			}
			if i < len(p.b) && p.b[i] == '}' {
				return o, i + 1, nil
			}
			return nil, i, p.errAt(i, "expected ',' or '}'")
		}
	case c == '[':
		if depth+1 > p.maxDepth+1 {
			return nil, i, inputErrorf("%s: nested deeper than %d levels", p.what, p.maxDepth)
		}
		a := []any{}
		i = p.ws(i + 1)
		if i < len(p.b) && p.b[i] == ']' {
			return a, i + 1, nil
		}
		for {
			v, j, err := p.value(i, depth+1)
			if err != nil {
				return nil, j, err
			}
			a = append(a, v)
			i = p.ws(j)
			if i < len(p.b) && p.b[i] == ',' {
				i = p.ws(i + 1)
				continue
			}
			if i < len(p.b) && p.b[i] == ']' {
				return a, i + 1, nil
			}
			return nil, i, p.errAt(i, "expected ',' or ']'")
		}
	case c == '"':
		s, j, err := p.str(i)
		return s, j, err
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range []struct {
			s string
			v any
		}{{"true", true}, {"false", false}, {"null", nil}} {
			if len(p.b)-i >= len(lit.s) && string(p.b[i:i+len(lit.s)]) == lit.s {
				return lit.v, i + len(lit.s), nil
			}
		}
		return nil, i, p.errAt(i, "invalid literal")
	case c == '-' || c >= '0' && c <= '9':
		j := i
		for j < len(p.b) && (p.b[j] == '-' || p.b[j] == '+' || p.b[j] == '.' || p.b[j] == 'e' || p.b[j] == 'E' || p.b[j] >= '0' && p.b[j] <= '9') {
			j++
		}
		num := string(p.b[i:j])
		if !json.Valid(p.b[i:j]) {
			return nil, i, p.errAt(i, "invalid number")
		}
		return jsonNumber(num), j, nil
	}
	return nil, i, p.errAt(i, "unexpected character")
}

// str reads the string starting at the quote at i.
func (p *jsonParser) str(i int) (string, int, error) {
	j := i + 1
	plain := true
	for j < len(p.b) && p.b[j] != '"' {
		c := p.b[j]
		if c == '\\' {
			plain = false
			j += 2
			continue
		}
		if c < 0x20 {
			return "", j, p.errAt(j, "control character in a string")
		}
		if c >= 0x80 {
			plain = false
		}
		j++
	}
	if j >= len(p.b) {
		return "", j, p.errAt(i, "unterminated string")
	}
	raw := p.b[i+1 : j]
	if plain {
		return string(raw), j + 1, nil
	}
	if !utf8.Valid(raw) {
		return "", i, p.errAt(i, "string is not valid UTF-8")
	}
	var s string
	if err := json.Unmarshal(p.b[i:j+1], &s); err != nil {
		return "", i, p.errAt(i, "invalid string escape")
	}
	return s, j + 1, nil
}

func appendJSON(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case string:
		return appendJSONString(dst, x), nil
	case jsonNumber:
		return append(dst, x...), nil
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, inputErrorf("result: %v cannot be written in JSON", x)
		}
		return strconv.AppendFloat(dst, x, 'g', -1, 64), nil
	case *object:
		dst = append(dst, '{')
		for i, k := range x.keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, k)
			dst = append(dst, ':')
			var err error
			if dst, err = appendJSON(dst, x.vals[k]); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendJSON(dst, e); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case time.Time:
		return appendJSONString(dst, x.UTC().Format(time.RFC3339Nano)), nil
	case bson.RawValue:
		if x.Type == bson.TypeObjectID {
			return appendJSONString(dst, x.ObjectID().Hex()), nil
		}
		if x.Type == bson.TypeDateTime {
			return appendJSONString(dst, x.Time().UTC().Format(time.RFC3339Nano)), nil
		}
		return nil, inputErrorf("a BSON %s value cannot be written in a JSON document", x.Type)
	}
	return nil, fmt.Errorf("cannot encode a %T in JSON", v)
}

const hexDigits = "0123456789abcdef"

func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// ---- BSON ----

func parseBSON(what string, b []byte, maxDepth int) (*object, error) {
	if err := bsoncore.Document(b).Validate(); err != nil {
		return nil, inputErrorf("%s: not a valid BSON document", what)
	}
	return bsonDoc(what, bsoncore.Document(b), 0, maxDepth)
}

func bsonDoc(what string, d bsoncore.Document, depth, maxDepth int) (*object, error) {
	els, err := d.Elements()
	if err != nil {
		return nil, inputErrorf("%s: not a valid BSON document", what)
	}
	o := newObject(len(els))
	for _, el := range els {
		k := el.Key()
		if !utf8.ValidString(k) {
			return nil, inputErrorf("%s: a key is not valid UTF-8", what)
		}
		v, err := bsonValue(what, el.Value(), depth, maxDepth)
		if err != nil {
			return nil, err
		}
		if _, dup := o.vals[k]; dup {
			return nil, inputErrorf("%s: duplicate key in a BSON document", what)
		}
		o.set(k, v)
	}
	return o, nil
}

func bsonValue(what string, v bsoncore.Value, depth, maxDepth int) (any, error) {
	switch v.Type {
	case bsoncore.TypeEmbeddedDocument, bsoncore.TypeArray:
		if depth+1 > maxDepth {
			return nil, inputErrorf("%s: nested deeper than %d levels", what, maxDepth)
		}
		if v.Type == bsoncore.TypeEmbeddedDocument {
			return bsonDoc(what, v.Document(), depth+1, maxDepth)
		}
		vals, err := v.Array().Values()
		if err != nil {
			return nil, inputErrorf("%s: not a valid BSON array", what)
		}
		a := make([]any, len(vals))
		for i, e := range vals {
			if a[i], err = bsonValue(what, e, depth+1, maxDepth); err != nil {
				return nil, err
			}
		}
		return a, nil
	case bsoncore.TypeString:
		s := v.StringValue()
		if !utf8.ValidString(s) {
			return nil, inputErrorf("%s: a string is not valid UTF-8", what)
		}
		return s, nil
	case bsoncore.TypeBoolean:
		return v.Boolean(), nil
	case bsoncore.TypeNull:
		return nil, nil
	case bsoncore.TypeInt32:
		return v.Int32(), nil
	case bsoncore.TypeInt64:
		return v.Int64(), nil
	case bsoncore.TypeDouble:
		return v.Double(), nil
	}
	return bson.RawValue{Type: bson.Type(v.Type), Value: v.Data}, nil
}

func encodeBSON(o *object) ([]byte, error) {
	return appendBSONDoc(nil, o)
}

func appendBSONDoc(dst []byte, o *object) ([]byte, error) {
	idx, dst := bsoncore.AppendDocumentStart(dst)
	for _, k := range o.keys {
		var err error
		if dst, err = appendBSONElement(dst, k, o.vals[k]); err != nil {
			return nil, err
		}
	}
	return bsoncore.AppendDocumentEnd(dst, idx)
}

func appendBSONElement(dst []byte, k string, v any) ([]byte, error) {
	if strings.IndexByte(k, 0) >= 0 {
		return nil, inputErrorf("result: a key contains a NUL character, which BSON cannot hold")
	}
	switch x := v.(type) {
	case nil:
		return bsoncore.AppendNullElement(dst, k), nil
	case bool:
		return bsoncore.AppendBooleanElement(dst, k, x), nil
	case string:
		return bsoncore.AppendStringElement(dst, k, x), nil
	case int32:
		return bsoncore.AppendInt32Element(dst, k, x), nil
	case int64:
		return bsoncore.AppendInt64Element(dst, k, x), nil
	case float64:
		return bsoncore.AppendDoubleElement(dst, k, x), nil
	case jsonNumber:
		n, err := numberValue(x)
		if err != nil {
			return nil, err
		}
		switch n := n.(type) {
		case int64:
			if n >= math.MinInt32 && n <= math.MaxInt32 {
				return bsoncore.AppendInt32Element(dst, k, int32(n)), nil
			}
			return bsoncore.AppendInt64Element(dst, k, n), nil
		default:
			return bsoncore.AppendDoubleElement(dst, k, n.(float64)), nil
		}
	case time.Time:
		return bsoncore.AppendDateTimeElement(dst, k, x.UnixMilli()), nil
	case *object:
		dst = bsoncore.AppendHeader(dst, bsoncore.TypeEmbeddedDocument, k)
		return appendBSONDoc(dst, x)
	case []any:
		dst = bsoncore.AppendHeader(dst, bsoncore.TypeArray, k)
		idx, out := bsoncore.AppendArrayStart(dst)
		for i, e := range x {
			var err error
			if out, err = appendBSONElement(out, strconv.Itoa(i), e); err != nil {
				return nil, err
			}
		}
		return bsoncore.AppendArrayEnd(out, idx)
	case bson.RawValue:
		dst = bsoncore.AppendHeader(dst, bsoncore.Type(x.Type), k)
		return append(dst, x.Value...), nil
	}
	return nil, fmt.Errorf("cannot encode a %T in BSON", v)
}

// numberValue converts a JSON number to int64 when it is an integer that
// fits, else to float64.
func numberValue(n jsonNumber) (any, error) {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i, nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, inputErrorf("invalid number")
	}
	if math.IsInf(f, 0) {
		return nil, inputErrorf("a number is out of the range of a double")
	}
	return f, nil
}

// depthOf returns the nesting depth of v below the top level, stopping
// once it exceeds limit.
func depthOf(v any, limit int) int {
	max := 0
	visit := func(c any) bool {
		switch c.(type) {
		case *object, []any:
			if d := 1 + depthOf(c, limit); d > max {
				max = d
			}
		}
		return max > limit
	}
	switch x := v.(type) {
	case *object:
		for _, k := range x.keys {
			if visit(x.vals[k]) {
				return max
			}
		}
	case []any:
		for _, e := range x {
			if visit(e) {
				return max
			}
		}
	}
	return max
}
