package domain

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"unicode/utf8"
)

// MaxNestingLimit is the largest nesting limit a document check accepts
// (encoding/json's own scanner stops at this depth).
const MaxNestingLimit = 10000

// DocumentFormat is what Sink knows about the bytes of a content type.
type DocumentFormat int

const (
	// FormatOpaque: Sink does not look inside the document.
	FormatOpaque DocumentFormat = iota
	// FormatJSON: application/json and every "+json" suffix type
	// (RFC 6839), such as application/ld+json.
	FormatJSON
	// FormatBSON: application/bson.
	FormatBSON
)

// FormatOf returns the format of the documents of contentType (an invalid
// content type is opaque: MediaType reports it).
func FormatOf(contentType string) DocumentFormat {
	if contentType == ContentTypeJSON {
		return FormatJSON // (nearly every document's: not even a scan of the bytes)
	}
	mt, err := MediaType(contentType)
	switch {
	case err != nil:
		return FormatOpaque
	case mt == ContentTypeJSON || strings.HasSuffix(mt, "+json"):
		return FormatJSON
	case mt == ContentTypeBSON:
		return FormatBSON
	}
	return FormatOpaque
}

// CheckDocument checks that d's bytes are what its content type says, for
// the content types Sink understands (FormatOf): one well-formed JSON value
// in UTF-8, or exactly one well-formed BSON document, with objects and
// arrays nested at most maxDepth levels below the top level. Other content
// types are opaque and always pass. The work is linear in len(d.Data).
//
// Errors never quote the document; they name the problem and where it is
// (a byte offset, and for JSON the line and column). A document nested too
// deep gets an error for which errors.Is(err, ErrTooDeep) holds.
func CheckDocument(d Document, maxDepth int) error {
	switch FormatOf(d.ContentType) {
	case FormatJSON:
		if err := CheckJSON(d.Data, maxDepth); err != nil {
			return fmt.Errorf("is not valid JSON: %w", err)
		}
	case FormatBSON:
		if err := ValidateBSON(d.Data, maxDepth); err != nil {
			return fmt.Errorf("is not valid BSON: %w", err)
		}
	}
	return nil
}

// CheckJSON checks that b is one well-formed JSON value (RFC 8259, UTF-8;
// what encoding/json accepts, with valid UTF-8 in strings) with objects and
// arrays nested at most maxDepth levels below the top level. It is one
// pass over b.
func CheckJSON(b []byte, maxDepth int) error {
	maxDepth = min(maxDepth, MaxNestingLimit)
	at, problem := scanJSON(b, maxDepth)
	switch problem {
	case jsonOK:
		return nil
	case jsonTooDeep:
		return &jsonDepthError{tooDeepError{maxDepth}, where(b, at)}
	case jsonEnds:
		if len(bytes.TrimSpace(b)) == 0 {
			return errors.New("the document is empty")
		}
		return fmt.Errorf("it ends before the value is complete (%s)", where(b, at))
	case jsonBadUTF8:
		return fmt.Errorf("invalid UTF-8 at %s", where(b, at))
	}
	return fmt.Errorf("syntax error at %s", where(b, at))
}

// jsonDepthError is a JSON document nested too deep, and where.
type jsonDepthError struct {
	tooDeepError
	at string
}

func (e *jsonDepthError) Error() string { return e.tooDeepError.Error() + " (" + e.at + ")" }

// What scanJSON found.
const (
	jsonOK      = iota
	jsonSyntax  // a byte that cannot be where it is
	jsonEnds    // the input ends inside the value
	jsonBadUTF8 // a string holds invalid UTF-8
	jsonTooDeep // an object or array opens more than maxDepth levels down
)

// scanJSON validates b as one JSON value in one pass and returns jsonOK,
// or the first problem and its offset. It accepts what encoding/json
// accepts (FuzzCheckJSON holds it to json.Valid), except that strings must
// be valid UTF-8 and nesting is bounded by maxDepth.
func scanJSON(b []byte, maxDepth int) (int, int) {
	const (
		value      = iota // a value is next
		after             // a value ended
		key               // a member name is next
		first             // the first member name of an object, or '}'
		firstValue        // the first element of an array, or ']'
	)
	var stackBuf [64]bool // per open container: true for an object
	stack := stackBuf[:0]
	state, i, n := value, 0, len(b)
	for {
		for i < n && jsonSpace[b[i]] {
			i++
		}
		if i >= n {
			if state == after && len(stack) == 0 {
				return 0, jsonOK
			}
			return n, jsonEnds
		}
		c := b[i]
		switch state {
		case first:
			if c == '}' {
				i++
				stack = stack[:len(stack)-1]
				state = after
				continue
			}
			state = key
			continue
		case firstValue:
			if c == ']' {
				i++
				stack = stack[:len(stack)-1]
				state = after
				continue
			}
			state = value
			continue
		case key:
			if c != '"' {
				return i, jsonSyntax
			}
			end, problem := scanJSONString(b, i)
			if problem != jsonOK {
				return end, problem
			}
			i = end
			for i < n && jsonSpace[b[i]] {
				i++
			}
			if i >= n {
				return n, jsonEnds
			}
			if b[i] != ':' {
				return i, jsonSyntax
			}
			i++
			state = value
		case after:
			if len(stack) == 0 {
				return i, jsonSyntax // something after the value
			}
			obj := stack[len(stack)-1]
			switch {
			case c == ',':
				i++
				if obj {
					state = key
				} else {
					state = value
				}
			case obj && c == '}' || !obj && c == ']':
				i++
				stack = stack[:len(stack)-1]
			default:
				return i, jsonSyntax
			}
		case value:
			var end, problem int
			switch c {
			case '{', '[':
				if len(stack) > maxDepth {
					return i, jsonTooDeep
				}
				stack = append(stack, c == '{')
				i++
				if c == '{' {
					state = first
				} else {
					state = firstValue
				}
				continue
			case '"':
				end, problem = scanJSONString(b, i)
			case 't':
				end, problem = scanLiteral(b, i, "true")
			case 'f':
				end, problem = scanLiteral(b, i, "false")
			case 'n':
				end, problem = scanLiteral(b, i, "null")
			default:
				end, problem = scanNumber(b, i)
			}
			if problem != jsonOK {
				return end, problem
			}
			i = end
			state = after
		}
	}
}

// jsonSpace holds, for each byte, whether it is JSON whitespace (the test
// before every token: one load and test instead of four comparisons).
var jsonSpace = [256]bool{' ': true, '\t': true, '\n': true, '\r': true}

// scanJSONString returns the offset after the JSON string at b[i] (a '"'),
// or the problem and its offset.
func scanJSONString(b []byte, i int) (int, int) {
	n := len(b)
	// Plain bytes (printable ASCII other than '"' and '\\'): the string's
	// first eight are tested as one word. When one of them is not plain
	// (a short string, such as most member names, ends there), the scan
	// goes straight to the first that is not (the lowest byte
	// specialJSONStringBits reports is one); else the rest goes in bulk
	// (plainPrefix). From the first byte that may need more than skipping,
	// byte by byte.
	i++
	if i+8 <= n {
		if special := specialJSONStringBits(binary.LittleEndian.Uint64(b[i:])); special != 0 {
			i += bits.TrailingZeros64(special) / 8
		} else {
			i += 8
			i += plainPrefix(b[i:])
		}
	}
	for i < n {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, jsonOK
		case c < 0x20:
			return i, jsonSyntax
		case c == '\\':
			if i+1 >= n {
				return n, jsonEnds
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k >= n {
						return n, jsonEnds
					}
					if !isHex(b[k]) {
						return k, jsonSyntax
					}
				}
				i += 6
			default:
				return i + 1, jsonSyntax
			}
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				return i, jsonBadUTF8
			}
			i += size
		}
	}
	return n, jsonEnds
}

// specialJSONStringBits is not zero when any of the eight bytes of x may
// need more than skipping in a JSON string: a control character (below
// 0x20), '"', '\\', or a byte of a multi-byte UTF-8 sequence (0x80 and
// above). It never misses one (it may report one that is not there, which
// only sends the bytes the slow way; the lowest byte it reports is one:
// the borrows of its subtractions carry upwards only). The masks of
// several words may be or-ed and tested once.
func specialJSONStringBits(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	// (y - ones*c) &^ y has the high bit of a byte of y below c set
	// (exact for bytes below 0x80, which is all that is left to test
	// once x's high bits are in the result); bytes equal to c are the
	// zero bytes of x ^ ones*c.
	control := (x - ones*0x20) &^ x
	qy, by := x^(ones*'"'), x^(ones*'\\')
	quote, backslash := (qy-ones)&^qy, (by-ones)&^by
	return (x | control | quote | backslash) & highs
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scanLiteral returns the offset after lit at b[i], or the problem.
func scanLiteral(b []byte, i int, lit string) (int, int) {
	for k := 0; k < len(lit); k++ {
		if i+k >= len(b) {
			return len(b), jsonEnds
		}
		if b[i+k] != lit[k] {
			return i + k, jsonSyntax
		}
	}
	return i + len(lit), jsonOK
}

// scanNumber returns the offset after the JSON number at b[i], or the
// problem: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) (int, int) {
	n := len(b)
	digits := func() (int, int) { // one or more
		if i >= n {
			return n, jsonEnds
		}
		if !isDigit(b[i]) {
			return i, jsonSyntax
		}
		for i++; i < n && isDigit(b[i]); i++ {
		}
		return i, jsonOK
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= n:
		return n, jsonEnds
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		for i++; i < n && isDigit(b[i]); i++ {
		}
	default:
		return i, jsonSyntax
	}
	if i < n && b[i] == '.' {
		i++
		if end, problem := digits(); problem != jsonOK {
			return end, problem
		}
	}
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < n && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if end, problem := digits(); problem != jsonOK {
			return end, problem
		}
	}
	return i, jsonOK
}

// where renders a byte offset of b as "byte N (line L, column C)", lines
// and columns counted from 1, columns in bytes.
func where(b []byte, offset int) string {
	offset = max(0, min(offset, len(b)))
	line, col := 1, 1
	for _, c := range b[:offset] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Sprintf("byte %d (line %d, column %d)", offset, line, col)
}
