package domain

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// KeyKind tells which of the typed key forms a Key holds.
type KeyKind uint8

// Key kinds. Their numeric values are part of the address encoding (see
// EncodeAddress) and must never change.
const (
	KeyInvalid  KeyKind = 0
	KeyString   KeyKind = 1
	KeyInt64    KeyKind = 2
	KeyBytes    KeyKind = 3
	KeyObjectID KeyKind = 4
)

// ObjectIDLength is the length of a MongoDB ObjectID key in bytes.
const ObjectIDLength = 12

func (k KeyKind) String() string {
	switch k {
	case KeyString:
		return "string"
	case KeyInt64:
		return "int64"
	case KeyBytes:
		return "bytes"
	case KeyObjectID:
		return "object_id"
	default:
		return "invalid"
	}
}

// Key is a typed record key. Exactly one of the value fields is meaningful,
// chosen by Kind. Use the constructors; the zero Key is invalid.
type Key struct {
	Kind KeyKind
	str  string // string value, or the raw bytes of a bytes or ObjectID key
	num  int64
}

// StringKey returns a string key.
func StringKey(s string) Key { return Key{Kind: KeyString, str: s} }

// Int64Key returns an int64 key.
func Int64Key(n int64) Key { return Key{Kind: KeyInt64, num: n} }

// BytesKey returns a bytes key. The slice is copied.
func BytesKey(b []byte) Key { return Key{Kind: KeyBytes, str: string(b)} }

// ObjectIDKey returns a MongoDB ObjectID key. It must be 12 bytes long
// (Validate reports it otherwise). The slice is copied.
func ObjectIDKey(b []byte) Key { return Key{Kind: KeyObjectID, str: string(b)} }

// String renders the key value for messages and logs: a string key as is
// (invalid UTF-8, which the API never lets through, as U+FFFD), an int64
// key in decimal, a bytes key in standard base64 (the form clients
// see bytes fields in) and an ObjectID key as its canonical 24 lower-case
// hex digits. Bytes and ObjectID keys never reach a message raw.
func (k Key) String() string {
	switch k.Kind {
	case KeyString:
		return strings.ToValidUTF8(k.str, "\uFFFD")
	case KeyInt64:
		return strconv.FormatInt(k.num, 10)
	case KeyBytes:
		return base64.StdEncoding.EncodeToString([]byte(k.str))
	case KeyObjectID:
		return hex.EncodeToString([]byte(k.str))
	default:
		return "<invalid key>"
	}
}

// StringValue returns the value of a string key ("" for other kinds).
func (k Key) StringValue() string {
	if k.Kind != KeyString {
		return ""
	}
	return k.str
}

// Int64 returns the value of an int64 key (0 for other kinds).
func (k Key) Int64() int64 { return k.num }

// Bytes returns a copy of the raw bytes of a bytes or ObjectID key (nil otherwise).
func (k Key) Bytes() []byte {
	if k.Kind != KeyBytes && k.Kind != KeyObjectID {
		return nil
	}
	return []byte(k.str)
}

// Size is the number of bytes the key value occupies (8 for int64).
func (k Key) Size() int {
	if k.Kind == KeyInt64 {
		return 8
	}
	return len(k.str)
}

// Equal reports whether two keys are the same kind and value.
func (k Key) Equal(o Key) bool { return k == o }

// Address is the logical location of one record. It never names a database,
// a collection or a storage-level identifier: adapters map it.
type Address struct {
	Store     string
	Namespace string
	Dataset   string
	Key       Key
}

// String renders the address for messages: store/namespace/dataset/kind:key,
// with the key rendered by Key.String. The result is valid UTF-8 whatever
// the address holds.
func (a Address) String() string {
	return strings.ToValidUTF8(fmt.Sprintf("%s/%s/%s/%s:%s", a.Store, a.Namespace, a.Dataset, a.Key.Kind, a.Key.String()), "\uFFFD")
}

// RecordID is a compact comparable identity of the record, for use as a map
// key. Two addresses have the same RecordID exactly when they are equal.
type RecordID string

// ID returns the record identity of the address (one allocation, the
// string: short addresses are encoded on the stack first).
func (a Address) ID() RecordID {
	var buf [96]byte
	return RecordID(AppendAddress(buf[:0], a))
}

// Equal reports whether two addresses name the same record.
func (a Address) Equal(o Address) bool { return a == o }

// DatasetRef identifies a dataset (the unit a storage adapter maps to a table or
// collection).
type DatasetRef struct {
	Store     string
	Namespace string
	Dataset   string
}

// DatasetRef returns the dataset part of the address.
func (a Address) DatasetRef() DatasetRef {
	return DatasetRef{Store: a.Store, Namespace: a.Namespace, Dataset: a.Dataset}
}

// String renders the dataset for messages: store/namespace/dataset, valid
// UTF-8 whatever the names hold.
func (d DatasetRef) String() string {
	return strings.ToValidUTF8(d.Store+"/"+d.Namespace+"/"+d.Dataset, "\uFFFD")
}
