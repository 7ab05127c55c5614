package mongodb

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/bsonwire"
)

// MaxDocumentBytes is MongoDB's limit on one stored document (16 MiB),
// including the _id and the hidden field Sink adds.
const MaxDocumentBytes = 16 * 1024 * 1024

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
// again), plus, when the record has an applied mark, "m": the mark (see
// appendMark). It is a sub-document so that later versions can add members;
// records written before the mark existed simply have no "m".
func appendMeta(dst []byte, field string, rev bson.ObjectID, idAdded bool, mark domain.AppliedMark) []byte {
	idx, dst := bsoncore.AppendDocumentElementStart(dst, field)
	dst = bsoncore.AppendInt32Element(dst, "v", metaVersion)
	dst = bsoncore.AppendObjectIDElement(dst, "rev", rev)
	if idAdded {
		dst = bsoncore.AppendBooleanElement(dst, metaIDAdded, true)
	}
	if !mark.IsZero() {
		dst = appendMark(dst, mark)
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

// Members of the hidden field.
const (
	// metaIDAdded says Sink added the _id.
	metaIDAdded = "idAdded"
	// metaMark holds the applied mark.
	metaMark = "m"
)

// appendMark appends the applied mark as the hidden field's "m" member:
// {"l": log, "p": int32 partition, "o": int64 offset} when the mark has a
// position, and "r": [{"i": mutation id, "v": revision}, ...] (oldest
// first) when its ring is not empty. Revisions this adapter issued are
// stored as ObjectIDs, anything else as a string.
func appendMark(dst []byte, m domain.AppliedMark) []byte {
	idx, dst := bsoncore.AppendDocumentElementStart(dst, metaMark)
	if !m.Position.IsZero() {
		dst = bsoncore.AppendStringElement(dst, "l", m.Position.Log)
		dst = bsoncore.AppendInt32Element(dst, "p", m.Position.Partition)
		dst = bsoncore.AppendInt64Element(dst, "o", m.Position.Offset)
	}
	if len(m.Recent) > 0 {
		aidx, d := bsoncore.AppendArrayElementStart(dst, "r")
		dst = d
		for i, e := range m.Recent {
			eidx, d := bsoncore.AppendDocumentElementStart(dst, strconv.Itoa(i))
			dst = bsoncore.AppendStringElement(d, "i", e.ID)
			if oid, ok := parseRevision(e.Revision); ok {
				dst = bsoncore.AppendObjectIDElement(dst, "v", oid)
			} else {
				dst = bsoncore.AppendStringElement(dst, "v", string(e.Revision))
			}
			dst, _ = bsoncore.AppendDocumentEnd(dst, eidx)
		}
		dst, _ = bsoncore.AppendArrayEnd(dst, aidx)
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, idx)
	return dst
}

// metaOverhead is the most bytes appendMeta adds for field when the applied
// mark's ring holds up to ring IDs: the space reserved in every document,
// so that a document accepted once can always be written with a full ring.
func metaOverhead(field string, ring int) int {
	m := domain.AppliedMark{Position: domain.SourcePosition{Log: strings.Repeat("x", domain.MaxLogBytes), Partition: 1, Offset: 1}}
	id := strings.Repeat("x", domain.MaxMutationIDBytes)
	rev := revisionToken(bson.ObjectID{})
	for range ring {
		m.Recent = append(m.Recent, domain.AppliedEntry{ID: id, Revision: rev})
	}
	return len(appendMeta(nil, field, bson.ObjectID{}, true, m))
}

// markOf reads the applied mark from the hidden field's sub-document
// (zero when it has none).
func (e *encoder) markOf(meta bsoncore.Document) (domain.AppliedMark, error) {
	var m domain.AppliedMark
	v, err := meta.LookupErr(metaMark)
	if err != nil {
		return m, nil
	}
	bad := func(what string) error {
		return fmt.Errorf("the record's %q field has a malformed applied mark (%s); remove the field or rename SINK_MONGODB_HIDDEN_FIELD", e.hidden, what)
	}
	doc, ok := v.DocumentOK()
	if !ok {
		return m, bad("not a sub-document")
	}
	if l, err := doc.LookupErr("l"); err == nil {
		log, ok1 := l.StringValueOK()
		p, ok2 := doc.Lookup("p").Int32OK()
		o, ok3 := doc.Lookup("o").Int64OK()
		if !ok1 || !ok2 || !ok3 || log == "" {
			return m, bad("position")
		}
		m.Position = domain.SourcePosition{Log: log, Partition: p, Offset: o}
	}
	r, err := doc.LookupErr("r")
	if err != nil {
		return m, nil
	}
	arr, ok := r.ArrayOK()
	if !ok {
		return m, bad("ring")
	}
	vals, err := arr.Values()
	if err != nil {
		return m, bad("ring")
	}
	m.Recent = make([]domain.AppliedEntry, 0, len(vals))
	for _, ev := range vals {
		ed, ok := ev.DocumentOK()
		if !ok {
			return m, bad("ring entry")
		}
		id, ok := ed.Lookup("i").StringValueOK()
		if !ok {
			return m, bad("ring entry")
		}
		var rev domain.Revision
		switch rv := ed.Lookup("v"); rv.Type {
		case bsoncore.TypeObjectID:
			oid, _ := rv.ObjectIDOK()
			rev = revisionToken(oid)
		case bsoncore.TypeString:
			rev = domain.Revision(rv.StringValue())
		default:
			return m, bad("ring entry")
		}
		m.Recent = append(m.Recent, domain.AppliedEntry{ID: id, Revision: rev})
	}
	return m, nil
}

// encoder turns client documents into stored documents.
type encoder struct {
	hidden string
	store  string
	// reserve is metaOverhead(hidden, ring) (0: computed for the default
	// ring on use; tests build encoders without it).
	reserve int
}

func (e *encoder) metaReserve() int {
	if e.reserve == 0 {
		e.reserve = metaOverhead(e.hidden, domain.DefaultAppliedRing)
	}
	return e.reserve
}

// body is a validated client document, ready to be stored with any
// revision and mark (assemble).
type body struct {
	id      bsoncore.Value // the key's _id value
	fields  []byte         // the client's top-level elements other than _id, in order
	idAdded bool           // the client's document had no _id
}

// assemble returns the stored document: _id first, the client's other
// fields, then the hidden field with rev and mark.
//
// Replacements are built without _id (withID false): MongoDB then keeps the
// stored _id exactly as it is (a legacy int32 or double _id stays an int32
// or a double), and an upsert that creates the record takes _id from the
// filter's equality on the key. A replacement that carried an _id of
// another numeric type would be refused by MongoDB (ImmutableField) or, on
// other servers, rewrite the stored _id.
func (e *encoder) assemble(b body, withID bool, rev bson.ObjectID, mark domain.AppliedMark) []byte {
	n := 4 + len(b.fields) + 64
	if withID {
		n += 1 + len(idKey) + 1 + len(b.id.Data)
	}
	out := make([]byte, 0, n)
	out = append(out, 0, 0, 0, 0)
	if withID {
		out = bsoncore.AppendValueElement(out, idKey, b.id)
	}
	out = append(out, b.fields...)
	out = appendMeta(out, e.hidden, rev, b.idAdded, mark)
	out = append(out, 0)
	binary.LittleEndian.PutUint32(out, uint32(len(out)))
	return out
}

// storedDocument validates a client document for the record with key k and
// returns the document to store: _id first (always the key's own value),
// then the client's other fields in their order, then the hidden field with
// rev (recording whether the client's document had no _id) and no mark.
// With rev nil nothing is built (Validate uses that to check without
// allocating a revision).
func (e *encoder) storedDocument(k domain.Key, d domain.Document, rev *bson.ObjectID) ([]byte, error) {
	b, err := e.body(k, d, rev != nil)
	if err != nil || rev == nil {
		return nil, err
	}
	return e.assemble(b, true, *rev, domain.AppliedMark{}), nil
}

// body validates a client document for the record with key k and, when
// build is set, returns it split for assemble.
//
// A client _id must equal the key. For an int64 key, an int32 or integral
// double _id of the same value is the same key to MongoDB (its _id index
// compares numbers by value), so it is accepted too: merges of legacy
// records carry the _id as it is stored. Which numeric type the stored _id
// has is never changed by a replacement (see assemble); a new record gets
// the key's int64.
//
// The size check reserves the hidden field with a full applied-mark ring
// (metaOverhead), so a document accepted here can be written whatever mark
// the record comes to carry.
//
// Messages never quote the client's field names or values (they are client
// data): they give positions and types.
func (e *encoder) body(k domain.Key, d domain.Document, build bool) (body, error) {
	if !domain.IsMediaType(d.ContentType, domain.ContentTypeBSON) {
		return body{}, fmt.Errorf("store %q (MongoDB) accepts only %s documents, got content type %q", e.store, domain.ContentTypeBSON, d.ContentType)
	}
	if err := bsonwire.Validate(d.Data); err != nil {
		return body{}, fmt.Errorf("document is not valid BSON: %w", err)
	}
	want, err := keyValue(k)
	if err != nil {
		return body{}, err
	}
	elems, err := bsoncore.Document(d.Data).Elements()
	if err != nil {
		return body{}, fmt.Errorf("document is not valid BSON: %w", err)
	}
	seen := make(map[string]int, len(elems))
	idElem := -1
	for i, el := range elems {
		key := el.Key()
		if j, dup := seen[key]; dup {
			return body{}, fmt.Errorf("document's top-level fields %d and %d (counting from 0) have the same name", j, i)
		}
		seen[key] = i
		switch {
		case key == e.hidden:
			return body{}, fmt.Errorf("document contains the top-level field %q, which Sink reserves for its record metadata (SINK_MONGODB_HIDDEN_FIELD); remove it", key)
		case key == idKey:
			idElem = i
		case len(key) > 0 && key[0] == '$':
			return body{}, fmt.Errorf("document's top-level field %d (counting from 0) starts with '$', which MongoDB does not allow in stored field names", i)
		}
	}
	if idElem >= 0 {
		if got := elems[idElem].Value(); !sameKey(got, want) {
			return body{}, fmt.Errorf("document _id (%s) differs from the address key (%s); omit _id or set it to the key", valueKind(got, want), typeName(want.Type))
		}
	}
	idSize := 1 + len(idKey) + 1 + len(want.Data)
	size := len(d.Data) + idSize + e.metaReserve()
	if idElem >= 0 {
		size -= len(elems[idElem])
	}
	if size > MaxDocumentBytes {
		return body{}, fmt.Errorf("document would be %d bytes when stored (with _id and the %q field, which reserves room for the applied-mark ring); MongoDB's limit is %d bytes", size, e.hidden, MaxDocumentBytes)
	}
	if !build {
		return body{}, nil
	}
	b := body{id: want, idAdded: idElem < 0}
	if idElem < 0 {
		b.fields = d.Data[4 : len(d.Data)-1]
		return b, nil
	}
	b.fields = make([]byte, 0, len(d.Data))
	for i, el := range elems {
		if i != idElem {
			b.fields = append(b.fields, el...)
		}
	}
	return b, nil
}

// sameKey reports whether a document's _id names the record of the key
// value want: the same type and bytes, or, for an int64 key, an int32 or
// integral double of the same value.
func sameKey(got, want bsoncore.Value) bool {
	if got.Type == want.Type {
		return bytes.Equal(got.Data, want.Data)
	}
	if want.Type != bsoncore.TypeInt64 {
		return false
	}
	switch got.Type {
	case bsoncore.TypeInt32, bsoncore.TypeDouble:
		id, ok := idOf(got)
		return ok && id == numID(want.Int64())
	}
	return false
}

// clientDocument splits a stored document into the document returned to
// clients and its revision (see clientRecord).
func (e *encoder) clientDocument(raw []byte) (domain.Document, domain.Revision, error) {
	r, err := e.clientRecord(raw)
	return r.Document, r.Revision, err
}

// clientRecord splits a stored document into the record returned to
// clients: the document is the stored one without the hidden field, and
// without _id when Sink added it (every other byte is as stored); the
// revision and applied mark come from the hidden field.
func (e *encoder) clientRecord(raw []byte) (domain.Record, error) {
	doc := bsoncore.Document(raw)
	elems, err := doc.Elements()
	if err != nil {
		return domain.Record{}, fmt.Errorf("stored document is not valid BSON: %w", err)
	}
	hidden := -1
	for i, el := range elems {
		if el.Key() == e.hidden {
			hidden = i
			break
		}
	}
	if hidden < 0 {
		return domain.Record{Document: domain.Document{ContentType: domain.ContentTypeBSON, Data: bytes.Clone(raw)}, Revision: LegacyRevision}, nil
	}
	meta := elems[hidden].Value()
	rev, err := e.revisionOf(meta)
	if err != nil {
		return domain.Record{}, err
	}
	mark, err := e.markOf(meta.Document())
	if err != nil {
		return domain.Record{}, err
	}
	idAdded := false
	if v, err := meta.Document().LookupErr(metaIDAdded); err == nil {
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
	return domain.Record{Document: domain.Document{ContentType: domain.ContentTypeBSON, Data: out}, Revision: revisionToken(rev), Mark: mark}, nil
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

// valueKind names the type of a document's _id for the key mismatch
// message, noting when the type is right but the value is not.
func valueKind(got, want bsoncore.Value) string {
	if got.Type == want.Type {
		return "another " + typeName(got.Type) + " value"
	}
	return "a value of type " + typeName(got.Type)
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
