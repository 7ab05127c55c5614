package domain

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// AddressEncodingV1 is the version byte of the current address encoding.
//
// Encoding v1 (all integers unsigned LEB128 "uvarint" unless noted):
//
//	byte     version = 0x01
//	uvarint  len(store)     bytes store
//	uvarint  len(namespace) bytes namespace
//	uvarint  len(dataset)   bytes dataset
//	byte     key kind (1 string, 2 int64, 3 bytes, 4 ObjectID)
//	key value:
//	  string, bytes: uvarint length, then the bytes
//	  int64:         8 bytes, big-endian two's complement
//	  ObjectID:      12 bytes
//
// Nothing may follow the key. The encoding is canonical: equal addresses
// encode to equal bytes and every valid encoding decodes to exactly one
// address, so it serves as a Kafka record key (all mutations of one record
// land in one partition) and as a map key.
const AddressEncodingV1 byte = 0x01

// EncodeAddress returns the canonical binary encoding of the address.
func EncodeAddress(a Address) []byte {
	n := 1 + 3*binary.MaxVarintLen64 + len(a.Store) + len(a.Namespace) + len(a.Dataset) + 1 + binary.MaxVarintLen64 + a.Key.Size()
	b := make([]byte, 0, n)
	return AppendAddress(b, a)
}

// AppendAddress appends the canonical encoding of a to b.
func AppendAddress(b []byte, a Address) []byte {
	b = append(b, AddressEncodingV1)
	b = appendString(b, a.Store)
	b = appendString(b, a.Namespace)
	b = appendString(b, a.Dataset)
	b = append(b, byte(a.Key.Kind))
	switch a.Key.Kind {
	case KeyString, KeyBytes:
		b = appendString(b, a.Key.str)
	case KeyInt64:
		b = binary.BigEndian.AppendUint64(b, uint64(a.Key.num))
	case KeyObjectID:
		b = append(b, a.Key.str...)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// ErrMalformedAddress is wrapped by every DecodeAddress error.
var ErrMalformedAddress = errors.New("malformed address encoding")

// DecodeAddress parses an encoding produced by EncodeAddress. It rejects
// unknown versions, unknown key kinds, truncated input and trailing bytes.
func DecodeAddress(b []byte) (Address, error) {
	var a Address
	if len(b) == 0 {
		return a, fmt.Errorf("%w: empty", ErrMalformedAddress)
	}
	if b[0] != AddressEncodingV1 {
		return a, fmt.Errorf("%w: unknown version 0x%02x", ErrMalformedAddress, b[0])
	}
	r := decoder{buf: b[1:]}
	a.Store = r.str("store")
	a.Namespace = r.str("namespace")
	a.Dataset = r.str("dataset")
	kind := KeyKind(r.byte("key kind"))
	switch kind {
	case KeyString:
		a.Key = StringKey(r.str("string key"))
	case KeyBytes:
		a.Key = Key{Kind: KeyBytes, str: r.str("bytes key")}
	case KeyInt64:
		a.Key = Int64Key(int64(binary.BigEndian.Uint64(r.fixed("int64 key", 8))))
	case KeyObjectID:
		a.Key = Key{Kind: KeyObjectID, str: string(r.fixed("ObjectID key", ObjectIDLength))}
	default:
		if r.err == nil {
			r.err = fmt.Errorf("%w: unknown key kind %d", ErrMalformedAddress, kind)
		}
	}
	if r.err == nil && len(r.buf) != 0 {
		r.err = fmt.Errorf("%w: %d trailing bytes", ErrMalformedAddress, len(r.buf))
	}
	if r.err != nil {
		return Address{}, r.err
	}
	return a, nil
}

type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated %s", ErrMalformedAddress, what)
	}
}

func (d *decoder) byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.buf) < 1 {
		d.fail(what)
		return 0
	}
	c := d.buf[0]
	d.buf = d.buf[1:]
	return c
}

func (d *decoder) fixed(what string, n int) []byte {
	if d.err != nil {
		return make([]byte, n)
	}
	if len(d.buf) < n {
		d.fail(what)
		return make([]byte, n)
	}
	v := d.buf[:n]
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) str(what string) string {
	if d.err != nil {
		return ""
	}
	n, w := binary.Uvarint(d.buf)
	if w <= 0 {
		d.fail(what + " length")
		return ""
	}
	// Reject non-minimal varints so that the encoding stays canonical.
	if w != len(binary.AppendUvarint(nil, n)) {
		d.err = fmt.Errorf("%w: non-canonical %s length", ErrMalformedAddress, what)
		return ""
	}
	d.buf = d.buf[w:]
	if n > uint64(len(d.buf)) {
		d.fail(what)
		return ""
	}
	s := string(d.buf[:n])
	d.buf = d.buf[n:]
	return s
}
