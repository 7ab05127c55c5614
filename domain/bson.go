package domain

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The BSON element types (bsonspec.org).
const (
	bsonDouble        = 0x01
	bsonString        = 0x02
	bsonDocument      = 0x03
	bsonArray         = 0x04
	bsonBinary        = 0x05
	bsonUndefined     = 0x06
	bsonObjectID      = 0x07
	bsonBoolean       = 0x08
	bsonDateTime      = 0x09
	bsonNull          = 0x0A
	bsonRegex         = 0x0B
	bsonDBPointer     = 0x0C
	bsonJavaScript    = 0x0D
	bsonSymbol        = 0x0E
	bsonCodeWithScope = 0x0F
	bsonInt32         = 0x10
	bsonTimestamp     = 0x11
	bsonInt64         = 0x12
	bsonDecimal128    = 0x13
	bsonMinKey        = 0xFF
	bsonMaxKey        = 0x7F
)

// ValidateBSON checks that b is exactly one well-formed BSON document, all
// the way down, with documents and arrays nested at most maxDepth levels
// below the top-level document. The work is linear in len(b) and the
// recursion is at most maxDepth+1 levels deep. A document nested too deep
// gets an error for which errors.Is(err, ErrTooDeep) holds.
//
// Errors never quote the document: field names and values are the client's
// data. They name the problem and where it is, as a path of element
// positions counted from 0 ("element 2.0.5": the sixth element of the first
// element of the third top-level element), shortened to its first
// MaxBSONPathElements positions.
func ValidateBSON(b []byte, maxDepth int) error {
	n, err := validateBSONDocument(b, 0, maxDepth)
	if err != nil {
		var pe *pathError
		if errors.As(err, &pe) {
			return pe.finish()
		}
		return err
	}
	if n != len(b) {
		return fmt.Errorf("%d bytes follow the document", len(b)-n)
	}
	return nil
}

// ErrTooDeep is matched (errors.Is) by the errors of ValidateBSON and
// CheckDocument for documents nested deeper than their limit.
var ErrTooDeep = errors.New("nested too deep")

// tooDeepError is a document nested deeper than limit levels.
type tooDeepError struct{ limit int }

func (e tooDeepError) Error() string {
	return fmt.Sprintf("documents and arrays are nested more than %d levels deep", e.limit)
}
func (e tooDeepError) Is(target error) bool { return target == ErrTooDeep }

// MaxBSONPathElements bounds the path in ValidateBSON's error messages.
const MaxBSONPathElements = 8

var errTruncated = errors.New("truncated")

// pathError is a validation error inside an element; the path is collected
// innermost first while the recursion unwinds.
type pathError struct {
	rev []int // element positions, innermost first
	err error
}

func (e *pathError) Error() string { return e.finish().Error() }
func (e *pathError) Unwrap() error { return e.err }

// finish renders the path outermost first, shortened to MaxBSONPathElements.
func (e *pathError) finish() error {
	var sb strings.Builder
	n := len(e.rev)
	for i := 0; i < n && i < MaxBSONPathElements; i++ {
		if i > 0 {
			sb.WriteByte('.')
		}
		sb.WriteString(strconv.Itoa(e.rev[n-1-i]))
	}
	if n > MaxBSONPathElements {
		fmt.Fprintf(&sb, "… (%d levels)", n)
	}
	return fmt.Errorf("element %s: %w", sb.String(), e.err)
}

// inElement records that err happened in the element at position pos.
func inElement(pos int, err error) error {
	var pe *pathError
	if errors.As(err, &pe) {
		pe.rev = append(pe.rev, pos)
		return pe
	}
	return &pathError{rev: []int{pos}, err: err}
}

// validateBSONDocument validates the document at the start of b and returns its length.
func validateBSONDocument(b []byte, depth, maxDepth int) (int, error) {
	if depth > maxDepth {
		return 0, tooDeepError{maxDepth}
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
	for pos := 0; len(body) > 0; pos++ {
		t := body[0]
		end := bytes.IndexByte(body[1:], 0)
		if end < 0 {
			return 0, inElement(pos, errors.New("field name is not NUL-terminated"))
		}
		rest := body[2+end:]
		l, err := bsonValueLength(t, rest, depth, maxDepth)
		if err != nil {
			return 0, inElement(pos, err)
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

// bsonValueLength validates the value of type t at the start of b and returns its length.
func bsonValueLength(t byte, b []byte, depth, maxDepth int) (int, error) {
	switch t {
	case bsonDouble, bsonDateTime, bsonTimestamp, bsonInt64:
		return fixed(b, 8)
	case bsonString, bsonJavaScript, bsonSymbol:
		return stringLength(b)
	case bsonDocument, bsonArray:
		return validateBSONDocument(b, depth+1, maxDepth)
	case bsonBinary:
		l, err := readLen(b)
		if err != nil {
			return 0, err
		}
		if l < 0 || l > len(b)-5 {
			return 0, fmt.Errorf("binary length %d does not fit", l)
		}
		return 5 + l, nil
	case bsonUndefined, bsonNull, bsonMinKey, bsonMaxKey:
		return 0, nil
	case bsonObjectID:
		return fixed(b, 12)
	case bsonBoolean:
		if len(b) < 1 {
			return 0, errTruncated
		}
		if b[0] > 1 {
			return 0, fmt.Errorf("boolean byte is %d, not 0 or 1", b[0])
		}
		return 1, nil
	case bsonRegex:
		p, err := cstringLength(b)
		if err != nil {
			return 0, err
		}
		o, err := cstringLength(b[p:])
		if err != nil {
			return 0, err
		}
		return p + o, nil
	case bsonDBPointer:
		s, err := stringLength(b)
		if err != nil {
			return 0, err
		}
		if _, err := fixed(b[s:], 12); err != nil {
			return 0, err
		}
		return s + 12, nil
	case bsonCodeWithScope:
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
		d, err := validateBSONDocument(b[4+s:total], depth+1, maxDepth)
		if err != nil {
			return 0, err
		}
		if 4+s+d != total {
			return 0, errors.New("code with scope length does not match its parts")
		}
		return total, nil
	case bsonInt32:
		return fixed(b, 4)
	case bsonDecimal128:
		return fixed(b, 16)
	default:
		return 0, fmt.Errorf("unknown BSON type 0x%02x", byte(t))
	}
}
