package mongodb

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/domain"
)

// MaxDocumentBytes is MongoDB's limit on one stored document (16 MiB),
// including the _id and the hidden field Sink adds.
const MaxDocumentBytes = 16 * 1024 * 1024

// maxNesting is MongoDB's limit on nested documents and arrays.
const maxNesting = 100

// LegacyRevision is the revision token of a record that exists but was never
// written by Sink (it has no hidden field). A conditional write with it
// matches only while the record still has no hidden field.
const LegacyRevision domain.Revision = "legacy"

// metaVersion is the version of the hidden sub-document layout.
const metaVersion = 1

// idKey is MongoDB's primary key field.
const idKey = "_id"

// keyValue returns the BSON value of the key as _id.
func keyValue(k domain.Key) (bsoncore.Value, error) {
	switch k.Kind {
	case domain.KeyString:
		return bsoncore.Value{Type: bsoncore.TypeString, Data: bsoncore.AppendString(nil, k.StringValue())}, nil
	case domain.KeyInt64:
		return bsoncore.Value{Type: bsoncore.TypeInt64, Data: bsoncore.AppendInt64(nil, k.Int64())}, nil
	case domain.KeyBytes:
		return bsoncore.Value{Type: bsoncore.TypeBinary, Data: bsoncore.AppendBinary(nil, 0, k.Bytes())}, nil
	case domain.KeyObjectID:
		b := k.Bytes()
		if len(b) != domain.ObjectIDLength {
			return bsoncore.Value{}, fmt.Errorf("object_id key must be %d bytes, got %d", domain.ObjectIDLength, len(b))
		}
		return bsoncore.Value{Type: bsoncore.TypeObjectID, Data: b}, nil
	default:
		return bsoncore.Value{}, errors.New("key kind must be string, int64, bytes or object_id")
	}
}

// idOf returns a comparable identity of an _id value for matching query
// results to requested keys. Integer _ids of legacy documents stored as
// int32 (or as integral doubles) match int64 keys, as MongoDB's own
// comparison does.
func idOf(v bsoncore.Value) (string, bool) {
	switch v.Type {
	case bsoncore.TypeInt32:
		n, ok := v.Int32OK()
		if !ok {
			return "", false
		}
		return numID(int64(n)), true
	case bsoncore.TypeInt64:
		n, ok := v.Int64OK()
		if !ok {
			return "", false
		}
		return numID(n), true
	case bsoncore.TypeDouble:
		f, ok := v.DoubleOK()
		if !ok || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
			return "", false
		}
		return numID(int64(f)), true
	case bsoncore.TypeBinary:
		sub, data, ok := v.BinaryOK()
		if !ok || sub != 0 {
			return "", false
		}
		return "b" + string(data), true
	case bsoncore.TypeString:
		s, ok := v.StringValueOK()
		if !ok {
			return "", false
		}
		return "s" + s, true
	case bsoncore.TypeObjectID:
		if len(v.Data) < 12 {
			return "", false
		}
		return "o" + string(v.Data[:12]), true
	}
	return "", false
}

func numID(n int64) string {
	var b [9]byte
	b[0] = 'n'
	binary.BigEndian.PutUint64(b[1:], uint64(n))
	return string(b[:])
}

// keyID returns the identity idOf gives the key's _id value.
func keyID(k domain.Key) string {
	switch k.Kind {
	case domain.KeyString:
		return "s" + k.StringValue()
	case domain.KeyInt64:
		return numID(k.Int64())
	case domain.KeyBytes:
		return "b" + string(k.Bytes())
	case domain.KeyObjectID:
		return "o" + string(k.Bytes())
	}
	return ""
}

// newRevision returns a fresh revision id. ObjectIDs combine time, a
// per-process random value and a counter, so a record never gets the same
// one twice, even after a delete and re-create.
func newRevision() bson.ObjectID { return bson.NewObjectID() }

func revisionToken(rev bson.ObjectID) domain.Revision {
	return domain.Revision(hex.EncodeToString(rev[:]))
}

// parseRevision decodes a token issued by revisionToken. ok is false for
// tokens this adapter never issues (they match no record).
func parseRevision(r domain.Revision) (bson.ObjectID, bool) {
	var oid bson.ObjectID
	if len(r) != 2*len(oid) {
		return oid, false
	}
	if _, err := hex.Decode(oid[:], []byte(r)); err != nil {
		return oid, false
	}
	return oid, true
}

// appendMeta appends the hidden field holding Sink's per-record metadata:
// {"v": 1, "rev": ObjectID} plus, when Sink added the _id because the
// client's document had none, "idAdded": true (reads then leave _id out
// again). It is a sub-document so that later versions can add members (for
// example applied mutation ids).
func appendMeta(dst []byte, field string, rev bson.ObjectID, idAdded bool) []byte {
	idx, dst := bsoncore.AppendDocumentElementStart(dst, field)
	dst = bsoncore.AppendInt32Element(dst, "v", metaVersion)
	dst = bsoncore.AppendObjectIDElement(dst, "rev", rev)
	if idAdded {
		dst = bsoncore.AppendBooleanElement(dst, metaIDAdded, true)
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

// metaIDAdded is the member of the hidden field that says Sink added the _id.
const metaIDAdded = "idAdded"

// metaOverhead is the most bytes appendMeta adds for field.
func metaOverhead(field string) int { return len(appendMeta(nil, field, bson.ObjectID{}, true)) }

// encoder turns client documents into stored documents.
type encoder struct {
	hidden string
	store  string
}

// storedDocument validates a client document for the record with key k and
// returns the document to store: _id first (the client's, or the key when
// the document has none), then the client's other fields in their order,
// then the hidden field with rev (recording whether _id was added). With rev nil the hidden field is left out
// (Validate uses that to check without allocating a revision).
func (e *encoder) storedDocument(k domain.Key, d domain.Document, rev *bson.ObjectID) ([]byte, error) {
	if d.ContentType != domain.ContentTypeBSON {
		return nil, fmt.Errorf("store %q (MongoDB) accepts only %s documents, got content type %q", e.store, domain.ContentTypeBSON, d.ContentType)
	}
	if err := validateBSON(d.Data); err != nil {
		return nil, fmt.Errorf("document is not valid BSON: %w", err)
	}
	want, err := keyValue(k)
	if err != nil {
		return nil, err
	}
	elems, err := bsoncore.Document(d.Data).Elements()
	if err != nil {
		return nil, fmt.Errorf("document is not valid BSON: %w", err)
	}
	seen := make(map[string]struct{}, len(elems))
	idElem := -1
	for i, el := range elems {
		key := el.Key()
		if _, dup := seen[key]; dup {
			return nil, fmt.Errorf("document has the top-level field %q twice", key)
		}
		seen[key] = struct{}{}
		switch {
		case key == e.hidden:
			return nil, fmt.Errorf("document contains the top-level field %q, which Sink reserves for its record metadata (SINK_MONGODB_HIDDEN_FIELD); remove it", key)
		case key == idKey:
			idElem = i
		case len(key) > 0 && key[0] == '$':
			return nil, fmt.Errorf("document has the top-level field %q; MongoDB does not allow stored field names to start with '$'", key)
		}
	}
	if idElem >= 0 {
		got := elems[idElem].Value()
		if got.Type != want.Type || !bytes.Equal(got.Data, want.Data) {
			return nil, fmt.Errorf("document _id %s (%s) differs from the address key %s (%s); omit _id or set it to the key", describe(got), typeName(got.Type), describe(want), typeName(want.Type))
		}
	}
	size := len(d.Data)
	if idElem < 0 {
		size += 1 + len(idKey) + 1 + len(want.Data)
	}
	size += metaOverhead(e.hidden)
	if size > MaxDocumentBytes {
		return nil, fmt.Errorf("document would be %d bytes when stored (with _id and the %q field); MongoDB's limit is %d bytes", size, e.hidden, MaxDocumentBytes)
	}
	if rev == nil {
		return nil, nil
	}
	out := make([]byte, 0, size)
	out = append(out, 0, 0, 0, 0)
	if idElem < 0 {
		out = bsoncore.AppendValueElement(out, idKey, want)
	} else {
		out = append(out, elems[idElem]...)
	}
	for i, el := range elems {
		if i != idElem {
			out = append(out, el...)
		}
	}
	out = appendMeta(out, e.hidden, *rev, idElem < 0)
	out = append(out, 0)
	binary.LittleEndian.PutUint32(out, uint32(len(out)))
	return out, nil
}

// clientDocument splits a stored document into the document returned to
// clients and its revision. The client document is the stored one without
// the hidden field, and without _id when Sink added it; every other byte is
// as stored.
func (e *encoder) clientDocument(raw []byte) (domain.Document, domain.Revision, error) {
	doc := bsoncore.Document(raw)
	elems, err := doc.Elements()
	if err != nil {
		return domain.Document{}, "", fmt.Errorf("stored document is not valid BSON: %w", err)
	}
	hidden := -1
	for i, el := range elems {
		if el.Key() == e.hidden {
			hidden = i
			break
		}
	}
	if hidden < 0 {
		return domain.Document{ContentType: domain.ContentTypeBSON, Data: bytes.Clone(raw)}, LegacyRevision, nil
	}
	rev, err := e.revisionOf(elems[hidden].Value())
	if err != nil {
		return domain.Document{}, "", err
	}
	idAdded := false
	if v, err := elems[hidden].Value().Document().LookupErr(metaIDAdded); err == nil {
		idAdded, _ = v.BooleanOK()
	}
	out := make([]byte, 0, len(raw)-len(elems[hidden]))
	out = append(out, 0, 0, 0, 0)
	for i, el := range elems {
		if i != hidden && !(idAdded && el.Key() == idKey) {
			out = append(out, el...)
		}
	}
	out = append(out, 0)
	binary.LittleEndian.PutUint32(out, uint32(len(out)))
	return domain.Document{ContentType: domain.ContentTypeBSON, Data: out}, revisionToken(rev), nil
}

// revisionOf reads the revision from the hidden field's value.
func (e *encoder) revisionOf(v bsoncore.Value) (bson.ObjectID, error) {
	var oid bson.ObjectID
	meta, ok := v.DocumentOK()
	if !ok {
		return oid, fmt.Errorf("the record's %q field is a %s, not Sink's metadata sub-document; remove the field or rename SINK_MONGODB_HIDDEN_FIELD", e.hidden, typeName(v.Type))
	}
	r, err := meta.LookupErr("rev")
	if err != nil || r.Type != bsoncore.TypeObjectID || len(r.Data) < 12 {
		return oid, fmt.Errorf("the record's %q field has no ObjectID \"rev\"; remove the field or rename SINK_MONGODB_HIDDEN_FIELD", e.hidden)
	}
	copy(oid[:], r.Data)
	return oid, nil
}

// describe renders an _id value for messages.
func describe(v bsoncore.Value) string {
	switch v.Type {
	case bsoncore.TypeString:
		if str, ok := v.StringValueOK(); ok {
			if len(str) > 64 {
				return fmt.Sprintf("%q…", str[:64])
			}
			return fmt.Sprintf("%q", str)
		}
	case bsoncore.TypeInt32:
		if n, ok := v.Int32OK(); ok {
			return fmt.Sprint(n)
		}
	case bsoncore.TypeInt64:
		if n, ok := v.Int64OK(); ok {
			return fmt.Sprint(n)
		}
	case bsoncore.TypeBinary:
		if sub, data, ok := v.BinaryOK(); ok {
			if len(data) > 32 {
				return fmt.Sprintf("%x… (subtype %d)", data[:32], sub)
			}
			return fmt.Sprintf("%x (subtype %d)", data, sub)
		}
	case bsoncore.TypeObjectID:
		if oid, ok := v.ObjectIDOK(); ok {
			return "ObjectId(" + hex.EncodeToString(oid[:]) + ")"
		}
	}
	return "a value"
}

// typeNames are MongoDB's $type aliases.
var typeNames = map[bsoncore.Type]string{
	bsoncore.TypeDouble: "double", bsoncore.TypeString: "string", bsoncore.TypeEmbeddedDocument: "object",
	bsoncore.TypeArray: "array", bsoncore.TypeBinary: "binary", bsoncore.TypeUndefined: "undefined",
	bsoncore.TypeObjectID: "objectId", bsoncore.TypeBoolean: "bool", bsoncore.TypeDateTime: "date",
	bsoncore.TypeNull: "null", bsoncore.TypeRegex: "regex", bsoncore.TypeDBPointer: "dbPointer",
	bsoncore.TypeJavaScript: "javascript", bsoncore.TypeSymbol: "symbol", bsoncore.TypeCodeWithScope: "javascriptWithScope",
	bsoncore.TypeInt32: "int32", bsoncore.TypeTimestamp: "timestamp", bsoncore.TypeInt64: "int64",
	bsoncore.TypeDecimal128: "decimal128", bsoncore.TypeMinKey: "minKey", bsoncore.TypeMaxKey: "maxKey",
}

func typeName(t bsoncore.Type) string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("type 0x%02x", byte(t))
}

// validateBSON checks that b is exactly one well-formed BSON document, all
// the way down (bsoncore's own Validate does not descend into embedded
// documents).
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

// validateDocument validates the document at the start of b and returns its length.
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

// stringLength validates a BSON string (int32 length including the NUL, bytes, NUL).
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

// valueLength validates the value of type t at the start of b and returns its length.
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
