package domain

import (
	"encoding/json"
	"errors"
	"fmt"
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

// CheckJSON checks that b is one well-formed JSON value (RFC 8259, UTF-8)
// with objects and arrays nested at most maxDepth levels below the top
// level. It is linear in len(b).
func CheckJSON(b []byte, maxDepth int) error {
	if at, ok := jsonTooDeep(b, maxDepth); ok {
		return &jsonDepthError{tooDeepError{maxDepth}, where(b, at)}
	}
	if !json.Valid(b) {
		var raw json.RawMessage
		var se *json.SyntaxError
		if err := json.Unmarshal(b, &raw); errors.As(err, &se) {
			switch {
			case strings.Contains(se.Error(), "exceeded max depth"):
				return &jsonDepthError{tooDeepError{maxDepth}, where(b, int(se.Offset))}
			case int(se.Offset) >= len(b) && strings.Contains(se.Error(), "unexpected end"):
				if len(strings.TrimSpace(string(b))) == 0 {
					return errors.New("the document is empty")
				}
				return fmt.Errorf("it ends before the value is complete (%s)", where(b, len(b)))
			}
			return fmt.Errorf("syntax error at %s", where(b, int(se.Offset)-1))
		}
		return errors.New("syntax error")
	}
	if !utf8.Valid(b) {
		at := 0
		for at < len(b) {
			r, n := utf8.DecodeRune(b[at:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			at += n
		}
		return fmt.Errorf("invalid UTF-8 at %s", where(b, at))
	}
	return nil
}

// jsonDepthError is a JSON document nested too deep, and where.
type jsonDepthError struct {
	tooDeepError
	at string
}

func (e *jsonDepthError) Error() string { return e.tooDeepError.Error() + " (" + e.at + ")" }

// jsonTooDeep scans b for an object or array opened more than maxDepth
// levels below the top level, outside strings, and returns its offset. It
// does not check anything else: json.Valid does.
func jsonTooDeep(b []byte, maxDepth int) (int, bool) {
	depth, inString := -1, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString:
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > maxDepth {
				return i, true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return 0, false
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
