package mergepatch

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// MergeBSON applies RFC 7396 merge-patch semantics to BSON documents: a
// patch member whose value is null removes the target's member, an embedded
// document is merged recursively (into an empty document when the target's
// member is absent or not a document), and any other value, arrays
// included, replaces the target's member as it is. Member order of the target
// is kept and new members are appended in patch order. Values are copied as
// raw BSON, so every type survives unchanged (an int64 stays an int64, a
// decimal128 a decimal128). target nil means no document.
func MergeBSON(target, patch []byte) ([]byte, error) {
	if err := validateBSON(patch); err != nil {
		return nil, fmt.Errorf("the intent is not a valid BSON document: %w", err)
	}
	if target != nil {
		if err := validateBSON(target); err != nil {
			return nil, fmt.Errorf("the current document is not a valid BSON document: %w", err)
		}
	}
	return mergeBSON(target, patch)
}

// JSONToBSON converts a JSON object to a BSON document, reading MongoDB
// Extended JSON (relaxed or canonical): plain integers become int32 or,
// when they do not fit, int64; numbers with a fraction or exponent become
// doubles; {"$numberLong": "5"}, {"$date": ...}, {"$oid": ...} and the other
// wrappers give their BSON types.
func JSONToBSON(data []byte) ([]byte, error) {
	if !json.Valid(data) {
		return nil, errors.New("not valid JSON")
	}
	if !isObject(data) {
		return nil, errors.New("a BSON document can only be made from a JSON object")
	}
	var raw bson.Raw
	if err := bson.UnmarshalExtJSON(data, false, &raw); err != nil {
		return nil, fmt.Errorf("cannot convert Extended JSON to BSON: %w", err)
	}
	return raw, nil
}

// field is one member of a document being built: its raw element bytes.
type field struct {
	key  string
	elem []byte
}

type fields struct {
	list  []field
	index map[string]int
}

func (f *fields) set(key string, elem []byte) {
	if i, ok := f.index[key]; ok {
		f.list[i].elem = elem
		return
	}
	f.index[key] = len(f.list)
	f.list = append(f.list, field{key: key, elem: elem})
}

func (f *fields) remove(key string) {
	i, ok := f.index[key]
	if !ok {
		return
	}
	f.list = append(f.list[:i], f.list[i+1:]...)
	delete(f.index, key)
	for j := i; j < len(f.list); j++ {
		f.index[f.list[j].key] = j
	}
}

func (f *fields) get(key string) ([]byte, bool) {
	i, ok := f.index[key]
	if !ok {
		return nil, false
	}
	return f.list[i].elem, true
}

func (f *fields) build() []byte {
	n := 5
	for _, x := range f.list {
		n += len(x.elem)
	}
	out := make([]byte, 4, n)
	for _, x := range f.list {
		out = append(out, x.elem...)
	}
	out = append(out, 0)
	binary.LittleEndian.PutUint32(out, uint32(len(out)))
	return out
}

// mergeBSON merges validated documents.
func mergeBSON(target, patch []byte) ([]byte, error) {
	t := &fields{index: map[string]int{}}
	if target != nil {
		els, err := bsoncore.Document(target).Elements()
		if err != nil {
			return nil, err
		}
		for _, el := range els {
			// A repeated key keeps its first position and its last value.
			t.set(el.Key(), el)
		}
	}
	pels, err := bsoncore.Document(patch).Elements()
	if err != nil {
		return nil, err
	}
	for _, p := range pels {
		key := p.Key()
		v := p.Value()
		switch v.Type {
		case bsoncore.TypeNull:
			t.remove(key)
		case bsoncore.TypeEmbeddedDocument:
			var cur []byte
			if el, ok := t.get(key); ok && bsoncore.Element(el).Value().Type == bsoncore.TypeEmbeddedDocument {
				cur = bsoncore.Element(el).Value().Data
			}
			merged, err := mergeBSON(cur, v.Data)
			if err != nil {
				return nil, err
			}
			t.set(key, bsoncore.AppendDocumentElement(nil, key, merged))
		default:
			t.set(key, p)
		}
	}
	return t.build(), nil
}

// maxNesting is MongoDB's limit on nested documents and arrays.
const maxNesting = 100

// validateBSON checks that b is exactly one well-formed BSON document, all the
// way down.
func validateBSON(b []byte) error {
	n, err := validateDocument(b, 0)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("%d bytes follow the document", len(b)-n)
	}
	return nil
}

var errTruncated = errors.New("truncated")

func validateDocument(b []byte, depth int) (int, error) {
	if depth > maxNesting {
		return 0, fmt.Errorf("documents and arrays are nested more than %d levels deep", maxNesting)
	}
	if len(b) < 5 {
		return 0, fmt.Errorf("document of %d bytes is shorter than the minimum of 5", len(b))
	}
	n := int(int32(binary.LittleEndian.Uint32(b)))
	if n < 5 || n > len(b) {
		return 0, fmt.Errorf("document length %d does not fit the %d bytes available", n, len(b))
	}
	if b[n-1] != 0 {
		return 0, errors.New("document does not end with a NUL byte")
	}
	body := b[4 : n-1]
	for len(body) > 0 {
		t := bsoncore.Type(body[0])
		end := bytes.IndexByte(body[1:], 0)
		if end < 0 {
			return 0, errors.New("field name is not NUL-terminated")
		}
		key := string(body[1 : 1+end])
		rest := body[2+end:]
		l, err := valueLength(t, rest, depth)
		if err != nil {
			return 0, fmt.Errorf("field %q: %w", key, err)
		}
		body = rest[l:]
	}
	return n, nil
}

func readLen(b []byte) (int, error) {
	if len(b) < 4 {
		return 0, errTruncated
	}
	return int(int32(binary.LittleEndian.Uint32(b))), nil
}

func stringLength(b []byte) (int, error) {
	l, err := readLen(b)
	if err != nil {
		return 0, err
	}
	if l < 1 || l > len(b)-4 {
		return 0, fmt.Errorf("string length %d does not fit", l)
	}
	if b[4+l-1] != 0 {
		return 0, errors.New("string does not end with a NUL byte")
	}
	return 4 + l, nil
}

func cstringLength(b []byte) (int, error) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return 0, errors.New("regular expression or C string is not NUL-terminated")
	}
	return i + 1, nil
}

func fixed(b []byte, n int) (int, error) {
	if len(b) < n {
		return 0, errTruncated
	}
	return n, nil
}

func valueLength(t bsoncore.Type, b []byte, depth int) (int, error) {
	switch t {
	case bsoncore.TypeDouble, bsoncore.TypeDateTime, bsoncore.TypeTimestamp, bsoncore.TypeInt64:
		return fixed(b, 8)
	case bsoncore.TypeString, bsoncore.TypeJavaScript, bsoncore.TypeSymbol:
		return stringLength(b)
	case bsoncore.TypeEmbeddedDocument, bsoncore.TypeArray:
		return validateDocument(b, depth+1)
	case bsoncore.TypeBinary:
		l, err := readLen(b)
		if err != nil {
			return 0, err
		}
		if l < 0 || l > len(b)-5 {
			return 0, fmt.Errorf("binary length %d does not fit", l)
		}
		return 5 + l, nil
	case bsoncore.TypeUndefined, bsoncore.TypeNull, bsoncore.TypeMinKey, bsoncore.TypeMaxKey:
		return 0, nil
	case bsoncore.TypeObjectID:
		return fixed(b, 12)
	case bsoncore.TypeBoolean:
		if len(b) < 1 {
			return 0, errTruncated
		}
		if b[0] > 1 {
			return 0, fmt.Errorf("boolean byte is %d, not 0 or 1", b[0])
		}
		return 1, nil
	case bsoncore.TypeRegex:
		p, err := cstringLength(b)
		if err != nil {
			return 0, err
		}
		o, err := cstringLength(b[p:])
		if err != nil {
			return 0, err
		}
		return p + o, nil
	case bsoncore.TypeDBPointer:
		s, err := stringLength(b)
		if err != nil {
			return 0, err
		}
		if _, err := fixed(b[s:], 12); err != nil {
			return 0, err
		}
		return s + 12, nil
	case bsoncore.TypeCodeWithScope:
		total, err := readLen(b)
		if err != nil {
			return 0, err
		}
		if total < 14 || total > len(b) {
			return 0, fmt.Errorf("code with scope length %d does not fit", total)
		}
		s, err := stringLength(b[4:total])
		if err != nil {
			return 0, err
		}
		d, err := validateDocument(b[4+s:total], depth+1)
		if err != nil {
			return 0, err
		}
		if 4+s+d != total {
			return 0, errors.New("code with scope length does not match its parts")
		}
		return total, nil
	case bsoncore.TypeInt32:
		return fixed(b, 4)
	case bsoncore.TypeDecimal128:
		return fixed(b, 16)
	default:
		return 0, fmt.Errorf("unknown BSON type 0x%02x", byte(t))
	}
}
