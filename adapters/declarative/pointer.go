package declarative

import (
	"strconv"
	"strings"
)

// parsePointer splits an RFC 6901 JSON Pointer into its unescaped
// segments. "" is the whole document.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, inputErrorf("a JSON Pointer must be empty or start with '/'")
	}
	parts := strings.Split(p[1:], "/")
	for i, s := range parts {
		for j := 0; j < len(s); j++ {
			if s[j] == '~' && (j+1 >= len(s) || s[j+1] != '0' && s[j+1] != '1') {
				return nil, inputErrorf("'~' must be followed by '0' or '1' in a JSON Pointer")
			}
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

func escapeSegment(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func formatPointer(segs []string) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(escapeSegment(s))
	}
	return b.String()
}

// arrayIndex reads an RFC 6901 array index: digits without leading zeros.
func arrayIndex(seg string, n int) (int, bool) {
	if seg == "" || len(seg) > 1 && seg[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(seg); i++ {
		if seg[i] < '0' || seg[i] > '9' {
			return 0, false
		}
	}
	i, err := strconv.Atoi(seg)
	if err != nil || i >= n {
		return 0, false
	}
	return i, true
}

func kindName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case *object:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int32, int64, float64, jsonNumber:
		return "a number"
	}
	return "a value of another type"
}

// get returns the value at segs.
func get(root any, segs []string) (any, bool) {
	cur := root
	for _, s := range segs {
		switch c := cur.(type) {
		case *object:
			v, ok := c.get(s)
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, ok := arrayIndex(s, len(c))
			if !ok {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// setAt returns cur with the value at segs replaced by v, creating missing
// objects on the way. "-" as the last segment of an array path appends.
func setAt(cur any, segs []string, v any, done []string) (any, error) {
	if len(segs) == 0 {
		return v, nil
	}
	s := segs[0]
	switch c := cur.(type) {
	case *object:
		child, ok := c.get(s)
		if !ok && len(segs) > 1 {
			child = newObject(1)
		}
		nv, err := setAt(child, segs[1:], v, append(done, s))
		if err != nil {
			return nil, err
		}
		c.set(s, nv)
		return c, nil
	case []any:
		if s == "-" && len(segs) == 1 {
			return append(c, v), nil
		}
		i, ok := arrayIndex(s, len(c))
		if !ok {
			return nil, inputErrorf("%s is an array of %d items and the next path segment is not an index in it", pointerOrRoot(done), len(c))
		}
		nv, err := setAt(c[i], segs[1:], v, append(done, s))
		if err != nil {
			return nil, err
		}
		c[i] = nv
		return c, nil
	}
	return nil, inputErrorf("%s is %s, not an object or array", pointerOrRoot(done), kindName(cur))
}

// removeAt returns cur without the value at segs (a missing value is no error).
func removeAt(cur any, segs []string) any {
	if len(segs) == 0 {
		return cur
	}
	s := segs[0]
	switch c := cur.(type) {
	case *object:
		if len(segs) == 1 {
			c.remove(s)
			return c
		}
		if child, ok := c.get(s); ok {
			c.vals[s] = removeAt(child, segs[1:])
		}
		return c
	case []any:
		i, ok := arrayIndex(s, len(c))
		if !ok {
			return c
		}
		if len(segs) == 1 {
			return append(c[:i:i], c[i+1:]...)
		}
		c[i] = removeAt(c[i], segs[1:])
		return c
	}
	return cur
}

func pointerOrRoot(segs []string) string {
	if len(segs) == 0 {
		return "the document"
	}
	return formatPointer(segs)
}
