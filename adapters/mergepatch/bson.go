package mergepatch

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/internal/bsonwire"
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
	if err := bsonwire.Validate(patch); err != nil {
		return nil, fmt.Errorf("the intent is not a valid BSON document: %w", err)
	}
	if target != nil {
		if err := bsonwire.Validate(target); err != nil {
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

// fields is a document being built: its members' raw element bytes, in order.
type fields = ordered[[]byte]

func buildDocument(f *fields) []byte {
	n := 5
	for _, x := range f.list {
		n += len(x.val)
	}
	out := make([]byte, 4, n)
	for _, x := range f.list {
		out = append(out, x.val...)
	}
	out = append(out, 0)
	binary.LittleEndian.PutUint32(out, uint32(len(out)))
	return out
}

// mergeBSON merges validated documents.
func mergeBSON(target, patch []byte) ([]byte, error) {
	t := newOrdered[[]byte]()
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
	return buildDocument(t), nil
}
