package mergepatch

// maxScanDepth is the nesting isCompactJSON accepts: encoding/json's own
// limit (deeper input takes the slow path, which rejects it).
const maxScanDepth = MaxMaxDepth

// isCompactJSON reports whether b is one valid JSON value, as
// encoding/json accepts it, that json.Compact would leave as it is (no
// space outside strings). It is the fast path of compactJSON: most
// documents and intents are written by programs and are compact already,
// and one pass that only validates costs a fraction of a compaction that
// copies. It never says true wrongly; false only means "take the slow
// path" (FuzzIsCompactJSON checks both against encoding/json).
func isCompactJSON(b []byte) bool {
	const (
		value = iota // a value is next
		after        // a value ended
		key          // a member name is next
	)
	var stackBuf [64]bool // per open container: true for an object
	stack := stackBuf[:0]
	state, i, n := value, 0, len(b)
	for {
		switch state {
		case value:
			if i >= n {
				return false
			}
			switch c := b[i]; c {
			case '{', '[':
				if len(stack) >= maxScanDepth {
					return false
				}
				i++
				if i < n && b[i] == c+2 { // '}' or ']'
					i++
					state = after
					continue
				}
				stack = append(stack, c == '{')
				if c == '{' {
					state = key
				}
				continue
			case '"':
				if i = skipJSONString(b, i); i < 0 {
					return false
				}
			case 't':
				if i = skipLiteral(b, i, "true"); i < 0 {
					return false
				}
			case 'f':
				if i = skipLiteral(b, i, "false"); i < 0 {
					return false
				}
			case 'n':
				if i = skipLiteral(b, i, "null"); i < 0 {
					return false
				}
			default:
				if i = skipNumber(b, i); i < 0 {
					return false
				}
			}
			state = after
		case after:
			if len(stack) == 0 {
				return i == n
			}
			if i >= n {
				return false
			}
			obj := stack[len(stack)-1]
			switch c := b[i]; {
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
				return false
			}
		case key:
			if i >= n || b[i] != '"' {
				return false
			}
			if i = skipJSONString(b, i); i < 0 || i >= n || b[i] != ':' {
				return false
			}
			i++
			state = value
		}
	}
}

// skipJSONString returns the index after the JSON string at b[i] (a '"'),
// or -1 if it is not a valid one. Like encoding/json, it accepts any byte
// but a control character inside, valid UTF-8 or not.
func skipJSONString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return -1
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// skipLiteral returns the index after lit at b[i], or -1.
func skipLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// skipNumber returns the index after the JSON number at b[i], or -1:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func skipNumber(b []byte, i int) int {
	n := len(b)
	if i < n && b[i] == '-' {
		i++
	}
	switch {
	case i < n && b[i] == '0':
		i++
	case i < n && '1' <= b[i] && b[i] <= '9':
		for i++; i < n && isDigit(b[i]); i++ {
		}
	default:
		return -1
	}
	if i < n && b[i] == '.' {
		i++
		if i >= n || !isDigit(b[i]) {
			return -1
		}
		for i++; i < n && isDigit(b[i]); i++ {
		}
	}
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < n && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= n || !isDigit(b[i]) {
			return -1
		}
		for i++; i < n && isDigit(b[i]); i++ {
		}
	}
	return i
}
