// Package mergepatch provides the built-in "merge-patch" merge profile:
// RFC 7396 JSON Merge Patch, applied to application/json documents (and to
// application/bson documents with the same semantics).
//
// Cost and limits. A merge parses each input once and is linear in the size
// of the document plus the intent, whatever the nesting and however many
// members it deletes; it looks at its context every few thousand members and
// stops when the context is done. Documents, intents and results may nest
// objects and arrays at most WithMaxDepth levels below the top level
// (DefaultMaxDepth, MongoDB's own limit, by default); deeper input is an
// invalid argument naming the input and the path: "intent: nesting depth
// exceeds 100 levels at /a/b/…". Error messages name inputs, paths and
// problems, never values.
//
// Semantics kept from RFC 7396, with these precise choices:
//   - Member order: the document's members keep their order; new members
//     are appended in intent order.
//   - Repeated member names (in the document or the intent, JSON or BSON,
//     at any level the merge reaches) count once, at the position of the
//     first, with the value of the last.
//   - The result is never nested deeper than the deeper of the document and
//     the intent, so checking both bounds it too.
//   - JSON results are compact; the names of the members of every object
//     the merge reaches are re-encoded as encoding/json writes them; other
//     values are copied as they are.
//   - BSON values are copied as raw BSON, so every type survives.
//   - "_id": on application/bson documents it is the record key (MongoDB's
//     immutable _id), so an intent that would remove it or change its value
//     is rejected; giving the same value is a no-op. On application/json
//     documents "_id" is an ordinary member and follows RFC 7396.
package mergepatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"
)

// MergeJSON applies the RFC 7396 merge patch to target (nil: no document)
// and returns the result, with the default nesting limit. Member order of
// the target is kept; new members are appended in patch order.
func MergeJSON(target, patch []byte) ([]byte, error) {
	return mergeJSON(newRun(context.Background(), 0), target, patch)
}

// jobj is a parsed JSON object: its members in document order, repeated
// names included. Objects inside arrays are not parsed (a merge never
// reaches them).
type jobj struct{ members []jmember }

type jmember struct {
	key []byte // the decoded name
	val []byte // the compact value
	obj *jobj  // the value, parsed, when it is an object
}

// compactJSON validates data and returns it compact (one pass of
// encoding/json's scanner).
func compactJSON(r *run, what string, data []byte) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(len(data))
	if err := json.Compact(&b, data); err != nil {
		// Compact's errors carry no position; a second pass on this
		// error path finds it. The message itself may quote the input.
		var raw json.RawMessage
		var se *json.SyntaxError
		if !errors.As(json.Unmarshal(data, &raw), &se) {
			return nil, inputErrorf("%s: not valid JSON", what)
		}
		if strings.Contains(se.Error(), "exceeded max depth") {
			// Deeper than MaxMaxDepth, so deeper than the limit.
			return nil, inputErrorf("%s: nesting depth exceeds %d levels (at byte %d)", what, r.maxDepth, se.Offset)
		}
		return nil, inputErrorf("%s: not valid JSON (syntax error at byte %d)", what, se.Offset)
	}
	return b.Bytes(), nil
}

// jparser parses compact, valid JSON (compactJSON's output) in one pass,
// checking the nesting depth before it descends.
type jparser struct {
	b    []byte
	r    *run
	what string
	at   path
}

// parseJSON parses the compact, valid JSON value b and returns it as an
// object (nil when it is not one).
func parseJSON(r *run, what string, b []byte) (*jobj, error) {
	p := &jparser{b: b, r: r, what: what}
	_, o, err := p.value(0, 0, true)
	return o, err
}

// value parses the value at p.b[i], which is at nesting depth depth if it is
// an object or an array; build asks for the object's members. It returns
// the index after the value.
func (p *jparser) value(i, depth int, build bool) (int, *jobj, error) {
	b := p.b
	switch b[i] {
	case '{':
		if depth > p.r.maxDepth {
			return 0, nil, tooDeep(p.what, p.r.maxDepth, &p.at)
		}
		var o *jobj
		if build {
			o = &jobj{}
		}
		i++
		if b[i] == '}' {
			return i + 1, o, nil
		}
		for {
			kend := skipString(b, i)
			rawKey := b[i:kend]
			p.at.pushKey(rawKey, true)
			start := kend + 1 // after the ':'
			end, sub, err := p.value(start, depth+1, build)
			if err != nil {
				return 0, nil, err
			}
			p.at.pop()
			if build {
				o.members = append(o.members, jmember{key: decodeKeyBytes(rawKey), val: b[start:end], obj: sub})
			}
			if err := p.r.step(1); err != nil {
				return 0, nil, err
			}
			i = end + 1
			if b[end] == '}' {
				return i, o, nil
			}
		}
	case '[':
		if depth > p.r.maxDepth {
			return 0, nil, tooDeep(p.what, p.r.maxDepth, &p.at)
		}
		i++
		if b[i] == ']' {
			return i + 1, nil, nil
		}
		for n := 0; ; n++ {
			p.at.pushIndex(n)
			end, _, err := p.value(i, depth+1, false)
			if err != nil {
				return 0, nil, err
			}
			p.at.pop()
			if err := p.r.step(1); err != nil {
				return 0, nil, err
			}
			i = end + 1
			if b[end] == ']' {
				return i, nil, nil
			}
		}
	case '"':
		return skipString(b, i), nil, nil
	default: // number, true, false, null
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
			i++
		}
		return i, nil, nil
	}
}

// skipString returns the index after the valid JSON string at b[i].
func skipString(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
}

// decodeKey decodes a valid JSON string token as encoding/json does
// (invalid UTF-8 and lone surrogates become U+FFFD).
func decodeKey(raw []byte) string { return string(decodeKeyBytes(raw)) }

// decodeKeyBytes is decodeKey without a copy when the name has no escapes.
func decodeKeyBytes(raw []byte) []byte {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return inner
	}
	var s string
	_ = json.Unmarshal(raw, &s)
	return []byte(s)
}

// appendKey appends name as encoding/json encodes a string.
func appendKey(dst []byte, name []byte) []byte {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			k, _ := json.Marshal(string(name))
			return append(dst, k...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, name...)
	return append(dst, '"')
}

func isJSONNull(v []byte) bool { return len(v) == 4 && string(v) == "null" }

func mergeJSON(r *run, target, patch []byte) ([]byte, error) {
	pc, err := compactJSON(r, "intent", patch)
	if err != nil {
		return nil, err
	}
	var tc []byte
	if target != nil {
		if tc, err = compactJSON(r, "current document", target); err != nil {
			return nil, err
		}
	}
	pobj, err := parseJSON(r, "intent", pc)
	if err != nil {
		return nil, err
	}
	var tobj *jobj
	if target != nil {
		if tobj, err = parseJSON(r, "current document", tc); err != nil {
			return nil, err
		}
	}
	if pobj == nil {
		return pc, nil // a patch that is not an object replaces the document
	}
	return mergeJSONObject(r, make([]byte, 0, len(tc)+len(pc)), tobj, pobj)
}

// jentry is one member of a merged object.
type jentry struct {
	key  []byte
	val  []byte // the document's value, compact (nil: a new member)
	t    *jobj  // the document's value when it is an object
	repl []byte // the intent's value, for replace
	p    *jobj  // the intent's object, for merge
	act  uint8
}

// mergeJSONObject appends the merge of patch into target (nil: no object)
// to dst: O(members of both) plus the nested merges.
func mergeJSONObject(r *run, dst []byte, target, patch *jobj) ([]byte, error) {
	var entries []jentry
	var idx index
	if target != nil {
		entries = make([]jentry, 0, len(target.members)+len(patch.members))
		idx = newIndex(len(target.members))
		for _, m := range target.members {
			if i, seen := idx.add(m.key); seen {
				entries[i].val, entries[i].t = m.val, m.obj
			} else {
				entries = append(entries, jentry{key: m.key, val: m.val, t: m.obj})
			}
			if err := r.step(1); err != nil {
				return nil, err
			}
		}
	} else {
		entries = make([]jentry, 0, len(patch.members))
		idx = newIndex(len(patch.members))
	}
	for _, m := range patch.members {
		i, found := idx.add(m.key)
		if !found {
			entries = append(entries, jentry{key: m.key})
		}
		e := &entries[i]
		switch {
		case isJSONNull(m.val):
			e.act = gone
		case m.obj != nil:
			e.act, e.p = merge, m.obj
		default:
			e.act, e.repl = replace, m.val
		}
		if err := r.step(1); err != nil {
			return nil, err
		}
	}
	dst = append(dst, '{')
	first := true
	var err error
	for i := range entries {
		e := &entries[i]
		if e.act == gone {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendKey(dst, e.key)
		dst = append(dst, ':')
		switch e.act {
		case keep:
			dst = append(dst, e.val...)
		case replace:
			dst = append(dst, e.repl...)
		case merge:
			if dst, err = mergeJSONObject(r, dst, e.t, e.p); err != nil {
				return nil, err
			}
		}
		if err := r.step(1); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}
