package domain

import (
	"bytes"
	"cmp"
	"strings"
)

// kindRank is the place of a key kind in the total key order: int64 keys,
// then string keys, then bytes keys, then ObjectID keys. It is MongoDB's
// _id index order (numbers, strings, binary data, ObjectIds), so that a
// MongoDB adapter can push key ranges down to that index.
func kindRank(k KeyKind) int {
	switch k {
	case KeyInt64:
		return 1
	case KeyString:
		return 2
	case KeyBytes:
		return 3
	case KeyObjectID:
		return 4
	}
	return 0
}

// KeyKindsInOrder lists the key kinds in key order.
var KeyKindsInOrder = []KeyKind{KeyInt64, KeyString, KeyBytes, KeyObjectID}

// CompareKeys is the total order of keys every adapter scans in (see
// docs/query.md): first by kind (int64, string, bytes, ObjectID); int64
// keys numerically; string keys by the bytes of their UTF-8; bytes keys by
// length, then by bytes (MongoDB's order of binary data); ObjectID keys by
// their bytes. It returns -1, 0 or +1.
func CompareKeys(a, b Key) int {
	if ra, rb := kindRank(a.Kind), kindRank(b.Kind); ra != rb {
		return cmp.Compare(ra, rb)
	}
	switch a.Kind {
	case KeyInt64:
		return cmp.Compare(a.num, b.num)
	case KeyBytes:
		if len(a.str) != len(b.str) {
			return cmp.Compare(len(a.str), len(b.str))
		}
	}
	return strings.Compare(a.str, b.str)
}

// KeyBound is one end of a key range.
type KeyBound struct {
	Key       Key
	Inclusive bool
}

// KeyRange selects the keys of a dataset: those at or after Start (when
// set), at or before End (when set), and, when Prefix is set, only string
// keys that start with Prefix (compared by bytes). The zero KeyRange is
// every key.
type KeyRange struct {
	Start  *KeyBound
	End    *KeyBound
	Prefix *string
}

// Contains reports whether k is in the range.
func (r KeyRange) Contains(k Key) bool {
	if r.Start != nil {
		c := CompareKeys(k, r.Start.Key)
		if c < 0 || (c == 0 && !r.Start.Inclusive) {
			return false
		}
	}
	if r.End != nil {
		c := CompareKeys(k, r.End.Key)
		if c > 0 || (c == 0 && !r.End.Inclusive) {
			return false
		}
	}
	if r.Prefix != nil && (k.Kind != KeyString || !strings.HasPrefix(k.str, *r.Prefix)) {
		return false
	}
	return true
}

// After reports whether k comes strictly after the cursor key last in the
// scan direction (descending: strictly before it).
func After(k, last Key, descending bool) bool {
	c := CompareKeys(k, last)
	if descending {
		return c < 0
	}
	return c > 0
}

// AppendKey appends a self-delimiting binary encoding of k: its kind byte,
// then the 8 big-endian bytes of an int64, or a 4-byte big-endian length
// and the bytes of the other kinds.
func AppendKey(b []byte, k Key) []byte {
	b = append(b, byte(k.Kind))
	if k.Kind == KeyInt64 {
		u := uint64(k.num)
		return append(b, byte(u>>56), byte(u>>48), byte(u>>40), byte(u>>32), byte(u>>24), byte(u>>16), byte(u>>8), byte(u))
	}
	n := len(k.str)
	b = append(b, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	return append(b, k.str...)
}

// ReadKey decodes a key AppendKey encoded at the start of b and returns
// the rest. ok is false when b does not start with one.
func ReadKey(b []byte) (k Key, rest []byte, ok bool) {
	if len(b) < 1 {
		return Key{}, nil, false
	}
	kind := KeyKind(b[0])
	b = b[1:]
	switch kind {
	case KeyInt64:
		if len(b) < 8 {
			return Key{}, nil, false
		}
		var u uint64
		for _, c := range b[:8] {
			u = u<<8 | uint64(c)
		}
		return Int64Key(int64(u)), b[8:], true
	case KeyString, KeyBytes, KeyObjectID:
		if len(b) < 4 {
			return Key{}, nil, false
		}
		n := int(b[0])<<24 | int(b[1])<<16 | int(b[2])<<8 | int(b[3])
		b = b[4:]
		if n > len(b) {
			return Key{}, nil, false
		}
		return Key{Kind: kind, str: string(b[:n])}, b[n:], true
	}
	return Key{}, nil, false
}

// equalBytes is bytes.Equal (kept here so the cursor code reads simply).
func equalBytes(a, b []byte) bool { return bytes.Equal(a, b) }
