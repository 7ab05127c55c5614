package domain

import (
	"fmt"
	"mime"
	"strings"
)

// MaxContentTypeLength bounds the length of a content type.
const MaxContentTypeLength = 255

// MediaType parses a content type such as "application/json; charset=utf-8"
// (RFC 9110: optional whitespace around ';' and '=', case-insensitive type,
// subtype and parameter names) and returns its lower-cased "type/subtype".
// Parameters are validated but not returned: the content type itself is
// kept as the client sent it, and comparisons use the media type.
func MediaType(contentType string) (string, error) {
	if len(contentType) > MaxContentTypeLength {
		return "", fmt.Errorf("is %d bytes; the limit is %d", len(contentType), MaxContentTypeLength)
	}
	if bareMediaType(contentType) {
		return contentType, nil // what parsing would return (every document's check: it saves a parse and an allocation)
	}
	return parseMediaType(contentType)
}

// parseMediaType is MediaType's general case.
func parseMediaType(contentType string) (string, error) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return "", fmt.Errorf("is not a media type like application/json or application/json; charset=utf-8: %w", err)
	}
	typ, sub, ok := strings.Cut(mt, "/")
	if !ok || typ == "" || sub == "" || strings.Contains(sub, "/") {
		return "", fmt.Errorf("is not a media type like application/json: it needs a type and a subtype")
	}
	return mt, nil
}

// IsMediaType reports whether contentType names the media type want (a
// lower-case "type/subtype" such as ContentTypeJSON), whatever its case and
// parameters. An invalid content type matches nothing.
func IsMediaType(contentType, want string) bool {
	if contentType == want {
		return true
	}
	mt, err := MediaType(contentType) // (a bare media type is not parsed)
	return err == nil && mt == want
}

// bareMediaType reports whether contentType is a valid media type that
// parsing returns unchanged: a lower-case type and subtype of token
// characters (RFC 9110) around one slash, and nothing else.
func bareMediaType(contentType string) bool {
	slash := -1
	for i := 0; i < len(contentType); i++ {
		c := contentType[i]
		if c == '/' {
			if slash >= 0 {
				return false
			}
			slash = i
			continue
		}
		if !bareTokenByte[c] {
			return false
		}
	}
	return slash > 0 && slash < len(contentType)-1
}

// bareTokenByte holds, for each byte, whether it may stand in a bare media
// type's type or subtype: a token character (RFC 9110) that is not an
// upper-case letter. (A table: every document's check looks at each byte
// of its content type; searching the separators for each took 2 % of a
// batch put's processor time.)
var bareTokenByte = func() (t [256]bool) {
	for c := '!'; c < 0x7f; c++ {
		t[c] = !('A' <= c && c <= 'Z') && !strings.ContainsRune(`()<>@,;:\"[]?=/`, c)
	}
	return t
}()
