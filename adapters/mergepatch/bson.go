package mergepatch

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/internal/bsonwire"
)

// idKey is the member that holds a BSON record's key.
const idKey = "_id"

// MergeBSON applies RFC 7396 merge-patch semantics to BSON documents, with
// the default nesting limit: a patch member whose value is null removes the
// target's member, an embedded document is merged recursively (into an
// empty document when the target's member is absent or not a document), and
// any other value, arrays included, replaces the target's member as it is.
// Member order of the target is kept and new members are appended in patch
// order. Values are copied as raw BSON, so every type survives unchanged (an
// int64 stays an int64, a decimal128 a decimal128). The target's "_id" (the
// record key) can be neither removed nor changed. target nil means no
// document.
func MergeBSON(target, patch []byte) ([]byte, error) {
	return mergeBSON(newRun(context.Background(), 0), target, patch)
}

// JSONToBSON converts a JSON object to a BSON document, reading MongoDB
// Extended JSON (relaxed or canonical): plain integers become int32 or,
// when they do not fit, int64; numbers with a fraction or exponent become
// doubles; {"$numberLong": "5"}, {"$date": ...}, {"$oid": ...} and the other
// wrappers give their BSON types. The default nesting limit applies.
func JSONToBSON(data []byte) ([]byte, error) {
	return jsonToBSON(newRun(context.Background(), 0), "intent", data)
}

func jsonToBSON(r *run, what string, data []byte) ([]byte, error) {
	c, err := compactJSON(r, what, data)
	if err != nil {
		return nil, err
	}
	// The nesting is checked here; the members are not needed.
	if _, _, err := (&jparser{b: c, r: r, what: what}).value(0, 0, false); err != nil {
		return nil, err
	}
	if c[0] != '{' {
		return nil, inputErrorf("%s: a BSON document can only be made from a JSON object", what)
	}
	var raw bson.Raw
	if err := bson.UnmarshalExtJSON(c, false, &raw); err != nil {
		// The driver's message may quote the input: find the offending
		// value and name its path instead.
		return nil, diagnoseExtJSON(what, c)
	}
	return raw, nil
}

// wrapperKeys are the names that make an object an Extended JSON value
// when they come first (the driver's rule).
var wrapperKeys = map[string]bool{
	"$numberInt": true, "$numberLong": true, "$oid": true, "$symbol": true, "$numberDouble": true,
	"$numberDecimal": true, "$binary": true, "$code": true, "$scope": true, "$timestamp": true,
	"$regularExpression": true, "$dbPointer": true, "$date": true, "$minKey": true, "$maxKey": true,
	"$undefined": true, "$uuid": true,
}

// diagnoseExtJSON explains why the compact, valid, depth-checked JSON c is
// not valid Extended JSON, by path: each Extended JSON value is converted
// on its own once (linear), the first that fails is named.
func diagnoseExtJSON(what string, c []byte) error {
	var at path
	var found error
	var walk func(i int, top bool) int
	walk = func(i int, top bool) int {
		switch c[i] {
		case '{':
			start := i
			i++
			if c[i] == '}' {
				return i + 1
			}
			if kend := skipString(c, i); !top && found == nil {
				if k := decodeKey(c[i:kend]); wrapperKeys[k] {
					end := skipValue(c, start)
					doc := append(append([]byte(`{"v":`), c[start:end]...), '}')
					var raw bson.Raw
					if bson.UnmarshalExtJSON(doc, false, &raw) != nil {
						found = inputErrorf("%s: %s: not a valid Extended JSON %s value", what, &at, k)
					}
					return end
				}
			}
			for {
				kend := skipString(c, i)
				if bytes.IndexByte(c[i:kend], 0) >= 0 || bytes.Contains(c[i:kend], []byte(`\u0000`)) {
					if found == nil {
						at.pushKey(c[i:kend], true)
						found = inputErrorf("%s: %s: a member name contains a NUL character, which BSON cannot hold", what, &at)
						at.pop()
					}
				}
				at.pushKey(c[i:kend], true)
				end := walk(kend+1, false)
				at.pop()
				i = end + 1
				if c[end] == '}' {
					return i
				}
			}
		case '[':
			i++
			if c[i] == ']' {
				return i + 1
			}
			for n := 0; ; n++ {
				at.pushIndex(n)
				end := walk(i, false)
				at.pop()
				i = end + 1
				if c[end] == ']' {
					return i
				}
			}
		default:
			return skipValue(c, i)
		}
	}
	walk(0, true)
	if found != nil {
		return found
	}
	return inputErrorf("%s: cannot be read as MongoDB Extended JSON", what)
}

// skipValue returns the index after the compact, valid JSON value at c[i].
func skipValue(c []byte, i int) int {
	switch c[i] {
	case '"':
		return skipString(c, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch c[i] {
			case '"':
				i = skipString(c, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
	default:
		for i < len(c) && c[i] != ',' && c[i] != '}' && c[i] != ']' {
			i++
		}
		return i
	}
}

// checkBSONDepth walks the documents and arrays of doc (not yet validated:
// it stops quietly where the structure breaks, Validate reports that) and
// rejects nesting deeper than the limit before descending further.
func checkBSONDepth(r *run, what string, doc []byte) error {
	var at path
	var walk func(d []byte, depth int) error
	walk = func(d []byte, depth int) error {
		if depth > r.maxDepth {
			return tooDeep(what, r.maxDepth, &at)
		}
		if len(d) < 5 {
			return nil
		}
		if n := int(int32(binary.LittleEndian.Uint32(d))); n >= 5 && n <= len(d) {
			d = d[:n]
		}
		rest := d[4 : len(d)-1]
		for len(rest) > 0 {
			el, next, ok := bsoncore.ReadElement(rest)
			if !ok {
				return nil
			}
			rest = next
			if err := r.step(1); err != nil {
				return err
			}
			switch bsoncore.Type(el[0]) {
			case bsoncore.TypeEmbeddedDocument, bsoncore.TypeArray:
				key := el[1 : bytes.IndexByte(el[1:], 0)+1] // an array's keys are its positions
				at.pushKey(key, false)
				if err := walk(el[len(key)+2:], depth+1); err != nil {
					return err
				}
				at.pop()
			}
		}
		return nil
	}
	return walk(doc, 0)
}

// checkBSON checks the nesting and then the wire format of an input.
func checkBSON(r *run, what string, doc []byte) error {
	if err := checkBSONDepth(r, what, doc); err != nil {
		return err
	}
	if err := bsonwire.Validate(doc); err != nil {
		return inputErrorf("%s: not a valid BSON document: %v", what, err)
	}
	return nil
}

func mergeBSON(r *run, target, patch []byte) ([]byte, error) {
	if err := checkBSON(r, "intent", patch); err != nil {
		return nil, err
	}
	if target != nil {
		if err := checkBSON(r, "current document", target); err != nil {
			return nil, err
		}
	}
	return mergeBSONDocument(r, make([]byte, 0, len(target)+len(patch)), target, patch, true)
}

// bentry is one member of a merged BSON document.
type bentry struct {
	key  []byte
	el   []byte // the document's raw element (nil: a new member)
	repl []byte // the intent's raw element, for replace and merge
	act  uint8
}

// docValue returns the embedded document held by element el, or nil.
func docValue(el bsoncore.Element) []byte {
	if el == nil || bsoncore.Type(el[0]) != bsoncore.TypeEmbeddedDocument {
		return nil
	}
	return el.Value().Data
}

// elements calls f with each element of the validated document doc.
func elements(r *run, doc []byte, f func(key, el []byte)) error {
	if doc == nil {
		return nil
	}
	rest := doc[4 : len(doc)-1]
	for len(rest) > 0 {
		el, next, ok := bsoncore.ReadElement(rest)
		if !ok {
			return errors.New("cannot read a validated BSON element")
		}
		rest = next
		f(el[1:bytes.IndexByte(el[1:], 0)+1], el)
		if err := r.step(1); err != nil {
			return err
		}
	}
	return nil
}

// countElements returns the number of elements of the validated document doc.
func countElements(doc []byte) (n int) {
	if doc == nil {
		return 0
	}
	for rest := doc[4 : len(doc)-1]; len(rest) > 0; n++ {
		_, next, ok := bsoncore.ReadElement(rest)
		if !ok {
			break
		}
		rest = next
	}
	return n
}

// mergeBSONDocument appends the merge of patch into target (nil: no
// document) to dst: O(members of both) plus the nested merges. top marks
// the record's top level, where "_id" is the record key.
func mergeBSONDocument(r *run, dst, target, patch []byte, top bool) ([]byte, error) {
	nt, np := countElements(target), countElements(patch)
	entries := make([]bentry, 0, nt+np)
	idx := newIndex(max(nt, np))
	err := elements(r, target, func(key, el []byte) {
		if i, seen := idx.add(key); seen {
			entries[i].el = el
		} else {
			entries = append(entries, bentry{key: key, el: el})
		}
	})
	if err != nil {
		return nil, err
	}
	err = elements(r, patch, func(key, el []byte) {
		i, found := idx.add(key)
		if !found {
			entries = append(entries, bentry{key: key})
		}
		e := &entries[i]
		switch bsoncore.Type(el[0]) {
		case bsoncore.TypeNull:
			e.act = gone
		case bsoncore.TypeEmbeddedDocument:
			e.act, e.repl = merge, el
		default:
			e.act, e.repl = replace, el
		}
	})
	if err != nil {
		return nil, err
	}
	var id []byte // the record key's element, as it was
	if top {
		if i, ok := idx.find([]byte(idKey)); ok && entries[i].el != nil {
			id = entries[i].el
			if entries[i].act == gone {
				return nil, inputErrorf("intent: %s: the record key cannot be removed by a merge", idKey)
			}
		}
	}
	start, dst := bsoncore.AppendDocumentStart(dst)
	for i := range entries {
		e := &entries[i]
		elStart := len(dst)
		switch e.act {
		case gone:
			continue
		case keep:
			dst = append(dst, e.el...)
		case replace:
			dst = append(dst, e.repl...)
		case merge:
			dst = append(append(append(dst, byte(bsoncore.TypeEmbeddedDocument)), e.key...), 0)
			if dst, err = mergeBSONDocument(r, dst, docValue(e.el), docValue(e.repl), false); err != nil {
				return nil, err
			}
		}
		if id != nil && string(e.key) == idKey && !bytes.Equal(dst[elStart:], id) {
			return nil, inputErrorf("intent: %s: the record key cannot be changed by a merge", idKey)
		}
		if err := r.step(1); err != nil {
			return nil, err
		}
	}
	return bsoncore.AppendDocumentEnd(dst, start)
}
