package client

import (
	"encoding/base64"
	"encoding/hex"
	"strconv"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

type keyKind uint8

const (
	keyNone keyKind = iota
	keyString
	keyInt64
	keyBytes
	keyObjectID
)

// Key is a record key of one of Sink's four kinds. Build it with StringKey,
// Int64Key, BytesKey or ObjectIDKey; the zero Key is invalid (the server
// rejects it with INVALID_ARGUMENT).
type Key struct {
	kind keyKind
	s    string // string, bytes and ObjectID values
	i    int64
}

// StringKey returns a string key.
func StringKey(s string) Key { return Key{kind: keyString, s: s} }

// Int64Key returns an integer key.
func Int64Key(i int64) Key { return Key{kind: keyInt64, i: i} }

// BytesKey returns a binary key (the bytes are copied).
func BytesKey(b []byte) Key { return Key{kind: keyBytes, s: string(b)} }

// ObjectIDKey returns a MongoDB ObjectID key; a bson.ObjectID is assignable
// to its parameter.
func ObjectIDKey(id [12]byte) Key { return Key{kind: keyObjectID, s: string(id[:])} }

// String renders the key for messages: the string itself, the integer in
// decimal, bytes in base64 and ObjectIDs in hex, each with its kind.
func (k Key) String() string {
	switch k.kind {
	case keyString:
		return "string:" + strconv.Quote(k.s)
	case keyInt64:
		return "int64:" + strconv.FormatInt(k.i, 10)
	case keyBytes:
		return "bytes:" + base64.StdEncoding.EncodeToString([]byte(k.s))
	case keyObjectID:
		return "objectid:" + hex.EncodeToString([]byte(k.s))
	}
	return "invalid"
}

// size is what the key counts toward the server's request-bytes limit.
func (k Key) size() int {
	if k.kind == keyInt64 {
		return 8
	}
	return len(k.s)
}

func (k Key) proto() *sinkv1.RecordKey {
	switch k.kind {
	case keyString:
		return &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: k.s}}
	case keyInt64:
		return &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_Int64{Int64: k.i}}
	case keyBytes:
		return &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_Bytes{Bytes: []byte(k.s)}}
	case keyObjectID:
		return &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_ObjectId{ObjectId: []byte(k.s)}}
	}
	return &sinkv1.RecordKey{}
}

// appendRoute appends the key's routing identity (kind and value).
func (k Key) appendRoute(b []byte) []byte {
	b = append(b, byte(k.kind))
	if k.kind == keyInt64 {
		return strconv.AppendInt(b, k.i, 10)
	}
	return append(b, k.s...)
}
