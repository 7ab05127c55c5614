// Package bsonwire checks the BSON wire format strictly, all the way down.
// It is shared by the adapters that handle application/bson documents
// (mongodb, mergepatch) and imports none of Sink's layers.
package bsonwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// MaxNesting is MongoDB's limit on nested documents and arrays.
const MaxNesting = 100

// ErrTooDeep is wrapped by the error Validate returns for documents nested
// more than MaxNesting levels deep (errors.Is works). Callers report it as
// an invalid argument, like every other validation error.
var ErrTooDeep = fmt.Errorf("documents and arrays are nested more than %d levels deep", MaxNesting)

// maxPathElements bounds the path in error messages.
const maxPathElements = 8

// Validate checks that b is exactly one well-formed BSON document, all
// the way down (bsoncore's own Validate does not descend into embedded
// documents). The work is linear in len(b) and the recursion is at most
// MaxNesting+1 levels deep.
//
// Errors never quote the document: field names and values are the client's
// data. They name the problem and where it is, as a path of element
// positions counted from 0 ("element 2.0.5": the sixth element of the first
// element of the third top-level element), shortened to its first
// maxPathElements positions.
func Validate(b []byte) error {
	n, err := validateDocument(b, 0)
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

var errTruncated = errors.New("truncated")

// pathError is a validation error inside an element; the path is collected
// innermost first while the recursion unwinds.
type pathError struct {
	rev []int // element positions, innermost first
	err error
}

func (e *pathError) Error() string { return e.finish().Error() }
func (e *pathError) Unwrap() error { return e.err }

// finish renders the path outermost first, shortened to maxPathElements.
func (e *pathError) finish() error {
	var sb strings.Builder
	n := len(e.rev)
	for i := 0; i < n && i < maxPathElements; i++ {
		if i > 0 {
			sb.WriteByte('.')
		}
		sb.WriteString(strconv.Itoa(e.rev[n-1-i]))
	}
	if n > maxPathElements {
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

// validateDocument validates the document at the start of b and returns its length.
func validateDocument(b []byte, depth int) (int, error) {
	if depth > MaxNesting {
		return 0, ErrTooDeep
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
		t := bsoncore.Type(body[0])
		end := bytes.IndexByte(body[1:], 0)
		if end < 0 {
			return 0, inElement(pos, errors.New("field name is not NUL-terminated"))
		}
		rest := body[2+end:]
		l, err := valueLength(t, rest, depth)
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
