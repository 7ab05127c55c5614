package domain

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// Scan limits.
const (
	DefaultScanPageSize = 100
	MaxScanPageSize     = 1000
	// MaxScanPageBytes bounds the document bytes of one page (a single
	// larger record still makes a page of its own); it stays well under
	// the 4 MiB a gRPC client accepts per message by default.
	MaxScanPageBytes = 2 << 20
	// MaxProjectionFields bounds a projection.
	MaxProjectionFields = 64
)

// Projection selects the top-level fields of the documents a scan returns:
// only Fields (Exclude false), or all but Fields (Exclude true). The zero
// Projection returns documents whole.
type Projection struct {
	Fields  []string
	Exclude bool
}

// IsZero reports whether the projection returns documents whole.
func (p Projection) IsZero() bool { return len(p.Fields) == 0 && !p.Exclude }

func (p Projection) has(name string) bool {
	for _, f := range p.Fields {
		if f == name {
			return true
		}
	}
	return false
}

func (p Projection) keeps(name string) bool { return p.has(name) != p.Exclude }

// Project applies the projection to a JSON or BSON document. Documents of
// other content types, and documents that are not objects, are returned
// as they are.
func (p Projection) Project(d Document) (Document, error) {
	if p.IsZero() {
		return d, nil
	}
	switch FormatOf(d.ContentType) {
	case FormatJSON:
		return p.projectJSON(d)
	case FormatBSON:
		return p.projectBSON(d)
	}
	return d, nil
}

func (p Projection) projectJSON(d Document) (Document, error) {
	trimmed := bytes.TrimSpace(d.Data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return d, nil
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if _, err := dec.Token(); err != nil {
		return d, err
	}
	out := []byte{'{'}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return d, err
		}
		name, _ := kt.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return d, err
		}
		if !p.keeps(name) {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		kb, _ := json.Marshal(name)
		out = append(out, kb...)
		out = append(out, ':')
		out = append(out, raw...)
	}
	out = append(out, '}')
	return Document{ContentType: d.ContentType, Data: out}, nil
}

func (p Projection) projectBSON(d Document) (Document, error) {
	b := d.Data
	if len(b) < 5 {
		return d, errBSONShort
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < 5 || n > len(b) {
		return d, errBSONShort
	}
	out := make([]byte, 4, n)
	body := b[4 : n-1]
	for len(body) > 0 {
		t := body[0]
		end := bytes.IndexByte(body[1:], 0)
		if end < 0 {
			return d, errBSONShort
		}
		name := string(body[1 : 1+end])
		vl, err := bsonValueLength(t, body[2+end:], 0, maxValueDepth)
		if err != nil {
			return d, err
		}
		el := body[:2+end+vl]
		body = body[len(el):]
		if p.keeps(name) {
			out = append(out, el...)
		}
	}
	out = append(out, 0)
	binary.LittleEndian.PutUint32(out, uint32(len(out)))
	return Document{ContentType: d.ContentType, Data: out}, nil
}

// ScanSpec is what a scan cursor is bound to: the dataset, range, filter,
// order and projection of the request.
type ScanSpec struct {
	Dataset    DatasetRef
	Range      KeyRange
	Filter     *Filter
	Descending bool
	Projection Projection
}

// Binding returns the hash that binds a cursor to the spec.
func (s *ScanSpec) Binding() [16]byte {
	var b []byte
	b = append(b, "sink-scan-1"...)
	b = appendStr(b, s.Dataset.Store)
	b = appendStr(b, s.Dataset.Namespace)
	b = appendStr(b, s.Dataset.Dataset)
	for _, bound := range []*KeyBound{s.Range.Start, s.Range.End} {
		if bound == nil {
			b = append(b, 0)
			continue
		}
		b = append(b, 1)
		if bound.Inclusive {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = AppendKey(b, bound.Key)
	}
	if s.Range.Prefix == nil {
		b = append(b, 0)
	} else {
		b = appendStr(append(b, 1), *s.Range.Prefix)
	}
	b = AppendFilter(b, s.Filter)
	if s.Descending {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	if s.Projection.Exclude {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = appendUvarint(b, uint64(len(s.Projection.Fields)))
	for _, f := range s.Projection.Fields {
		b = appendStr(b, f)
	}
	sum := sha256.Sum256(b)
	var out [16]byte
	copy(out[:], sum[:])
	return out
}

// cursorVersion is the first byte of every cursor.
const cursorVersion = 1

// MaxCursorBytes bounds a cursor: version, binding, and a key of up to
// maxKeyBytes bytes.
func MaxCursorBytes(maxKeyBytes int) int { return 1 + 16 + 5 + maxKeyBytes }

// EncodeCursor returns the resume cursor of a scan of spec whose last
// scanned key is last. The server keeps nothing: the cursor is the key
// plus the binding.
func EncodeCursor(spec *ScanSpec, last Key) []byte {
	h := spec.Binding()
	b := make([]byte, 0, 1+16+5+last.Size())
	b = append(b, cursorVersion)
	b = append(b, h[:]...)
	return AppendKey(b, last)
}

// Cursor errors.
var (
	ErrCursorMalformed = errors.New("the cursor is malformed (not a cursor this server issued)")
	ErrCursorMismatch  = errors.New("the cursor was issued for another request: dataset, range, filter, order and projection must be the same as the request that returned it")
)

// DecodeCursor checks a cursor against spec and returns its key, which is
// always inside spec's range: a cursor can only resume the request it was
// issued for, on the dataset spec names.
func DecodeCursor(spec *ScanSpec, c []byte, maxKeyBytes int) (Key, error) {
	if len(c) > MaxCursorBytes(maxKeyBytes) || len(c) < 1+16 || c[0] != cursorVersion {
		return Key{}, ErrCursorMalformed
	}
	h := spec.Binding()
	if !equalBytes(c[1:17], h[:]) {
		return Key{}, ErrCursorMismatch
	}
	k, rest, ok := ReadKey(c[17:])
	if !ok || len(rest) != 0 {
		return Key{}, ErrCursorMalformed
	}
	if k.Kind == KeyObjectID && len(k.str) != ObjectIDLength {
		return Key{}, ErrCursorMalformed
	}
	if !spec.Range.Contains(k) {
		return Key{}, fmt.Errorf("%w: its key is outside the request's range", ErrCursorMismatch)
	}
	return k, nil
}
