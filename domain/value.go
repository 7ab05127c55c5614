package domain

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

// ValueKind is the type bracket of a document value as filters see it
// (docs/query.md). Values of different kinds never compare equal and never
// compare as less or greater.
type ValueKind uint8

// Value kinds.
const (
	ValueNull ValueKind = iota + 1
	ValueBool
	ValueNumber
	ValueString
	ValueObject
	ValueArray
	// ValueOther is any other BSON type (ObjectId, binary, date, decimal,
	// ...): it exists for exists, and matches no comparison.
	ValueOther
)

// Value is a decoded document value: a JSON value, or a BSON value mapped
// to the same kinds (int32, int64 and double are all numbers).
type Value struct {
	Kind ValueKind
	Bool bool
	// Numbers: Int when IsFloat is false, else Float.
	Int     int64
	Float   float64
	IsFloat bool
	Str     string
	Fields  []Field // objects, in document order
	Elems   []Value // arrays
}

// Field is one member of an object value.
type Field struct {
	Name  string
	Value Value
}

// Null, Bool, Int, Float and String make scalar values.
func Null() Value                { return Value{Kind: ValueNull} }
func BoolValue(b bool) Value     { return Value{Kind: ValueBool, Bool: b} }
func IntValue(n int64) Value     { return Value{Kind: ValueNumber, Int: n} }
func FloatValue(f float64) Value { return Value{Kind: ValueNumber, Float: f, IsFloat: true} }
func StringValue(s string) Value { return Value{Kind: ValueString, Str: s} }

// Lookup returns the first member of an object named name.
func (v *Value) Lookup(name string) (*Value, bool) {
	for i := range v.Fields {
		if v.Fields[i].Name == name {
			return &v.Fields[i].Value, true
		}
	}
	return nil, false
}

// maxValueDepth bounds the recursion of the decoders; documents are
// checked against the (smaller) configured depth before they are stored.
const maxValueDepth = 200

var errValueTooDeep = errors.New("document nested too deep to evaluate")

// DecodeDocument decodes a JSON or BSON document (by its content type) to a
// Value. Other content types are an error: filters cannot look inside them.
func DecodeDocument(d Document) (Value, error) {
	switch FormatOf(d.ContentType) {
	case FormatJSON:
		return DecodeJSON(d.Data)
	case FormatBSON:
		return DecodeBSON(d.Data)
	}
	return Value{}, fmt.Errorf("content type %q cannot be filtered (only JSON and BSON documents)", d.ContentType)
}

// DecodeJSON decodes one JSON value. Integers that fit an int64 are
// integers, other numbers doubles.
func DecodeJSON(b []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeJSONValue(dec, 0)
	if err != nil {
		return Value{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return Value{}, errors.New("data follows the JSON value")
	}
	return v, nil
}

func decodeJSONValue(dec *json.Decoder, depth int) (Value, error) {
	if depth > maxValueDepth {
		return Value{}, errValueTooDeep
	}
	tok, err := dec.Token()
	if err != nil {
		return Value{}, err
	}
	switch t := tok.(type) {
	case nil:
		return Null(), nil
	case bool:
		return BoolValue(t), nil
	case string:
		return StringValue(t), nil
	case json.Number:
		return jsonNumber(string(t))
	case json.Delim:
		switch t {
		case '{':
			v := Value{Kind: ValueObject, Fields: []Field{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return Value{}, err
				}
				name, _ := kt.(string)
				fv, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return Value{}, err
				}
				v.Fields = append(v.Fields, Field{Name: name, Value: fv})
			}
			_, err := dec.Token()
			return v, err
		case '[':
			v := Value{Kind: ValueArray, Elems: []Value{}}
			for dec.More() {
				ev, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return Value{}, err
				}
				v.Elems = append(v.Elems, ev)
			}
			_, err := dec.Token()
			return v, err
		}
	}
	return Value{}, fmt.Errorf("unexpected JSON token")
}

func jsonNumber(s string) (Value, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return IntValue(n), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return Value{}, err
	}
	return FloatValue(f), nil
}

// DecodeBSON decodes one BSON document.
func DecodeBSON(b []byte) (Value, error) {
	v, n, err := decodeBSONDoc(b, false, 0)
	if err != nil {
		return Value{}, err
	}
	if n != len(b) {
		return Value{}, errors.New("data follows the BSON document")
	}
	return v, nil
}

var errBSONShort = errors.New("BSON document truncated")

func decodeBSONDoc(b []byte, array bool, depth int) (Value, int, error) {
	if depth > maxValueDepth {
		return Value{}, 0, errValueTooDeep
	}
	if len(b) < 5 {
		return Value{}, 0, errBSONShort
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < 5 || n > len(b) || b[n-1] != 0 {
		return Value{}, 0, errBSONShort
	}
	v := Value{Kind: ValueObject, Fields: []Field{}}
	if array {
		v = Value{Kind: ValueArray, Elems: []Value{}}
	}
	body := b[4 : n-1]
	for len(body) > 0 {
		t := body[0]
		end := bytes.IndexByte(body[1:], 0)
		if end < 0 {
			return Value{}, 0, errBSONShort
		}
		name := string(body[1 : 1+end])
		body = body[2+end:]
		ev, used, err := decodeBSONValue(t, body, depth)
		if err != nil {
			return Value{}, 0, err
		}
		body = body[used:]
		if array {
			v.Elems = append(v.Elems, ev)
		} else {
			v.Fields = append(v.Fields, Field{Name: name, Value: ev})
		}
	}
	return v, n, nil
}

func decodeBSONValue(t byte, b []byte, depth int) (Value, int, error) {
	need := func(n int) error {
		if n < 0 || n > len(b) {
			return errBSONShort
		}
		return nil
	}
	switch t {
	case bsonDouble:
		if err := need(8); err != nil {
			return Value{}, 0, err
		}
		return FloatValue(math.Float64frombits(binary.LittleEndian.Uint64(b))), 8, nil
	case bsonString:
		if err := need(4); err != nil {
			return Value{}, 0, err
		}
		n := int(int32(binary.LittleEndian.Uint32(b)))
		if err := need(4 + n); err != nil || n < 1 {
			return Value{}, 0, errBSONShort
		}
		return StringValue(string(b[4 : 4+n-1])), 4 + n, nil
	case bsonDocument, bsonArray:
		v, n, err := decodeBSONDoc(b, t == bsonArray, depth+1)
		return v, n, err
	case bsonBoolean:
		if err := need(1); err != nil {
			return Value{}, 0, err
		}
		return BoolValue(b[0] != 0), 1, nil
	case bsonNull:
		return Null(), 0, nil
	case bsonInt32:
		if err := need(4); err != nil {
			return Value{}, 0, err
		}
		return IntValue(int64(int32(binary.LittleEndian.Uint32(b)))), 4, nil
	case bsonInt64:
		if err := need(8); err != nil {
			return Value{}, 0, err
		}
		return IntValue(int64(binary.LittleEndian.Uint64(b))), 8, nil
	}
	n, err := bsonValueLength(t, b, depth, maxValueDepth)
	if err != nil {
		return Value{}, 0, err
	}
	return Value{Kind: ValueOther}, n, nil
}
