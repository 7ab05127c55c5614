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
	"sync"
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

// compactJSON validates data and returns it compact: data itself when it
// is compact already (isCompactJSON), else a compacted copy (one pass of
// encoding/json's scanner).
func compactJSON(r *run, what string, data []byte) ([]byte, error) {
	if isCompactJSON(data) {
		return data, nil
	}
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
	// stack holds the members of the objects being parsed, innermost
	// last; a finished object's members move to arena, which is
	// allocated in chunks, so that an object costs no allocation of its
	// own beyond its jobj.
	stack []jmember
	arena []jmember
}

// maxFirstChunk bounds the first arena chunk, which is sized by counting
// ':' (strings may hold any number of them).
const maxFirstChunk = 1024

// take moves the members of the object being finished (stack[mark:]) to
// the arena and returns them.
func (p *jparser) take(mark int) []jmember {
	n := len(p.stack) - mark
	if cap(p.arena)-len(p.arena) < n {
		p.arena = make([]jmember, 0, max(n, 2*cap(p.arena), 8))
	}
	start := len(p.arena)
	p.arena = append(p.arena, p.stack[mark:]...)
	clear(p.stack[mark:]) // (the stack holds no references to finished objects)
	p.stack = p.stack[:mark]
	return p.arena[start:len(p.arena):len(p.arena)]
}

// parsers keeps parsers' scratch space (stack, arena, path) between
// merges: nothing of a merge's parse is referenced once it returned.
var parsers = sync.Pool{New: func() any { return new(jparser) }}

// maxPooledMembers bounds the scratch space a pooled parser keeps.
const maxPooledMembers = 4096

func newJParser(r *run) *jparser {
	p := parsers.Get().(*jparser)
	p.r = r
	return p
}

// release returns p to the pool, holding no references to the merge's
// inputs.
func (p *jparser) release() {
	if cap(p.arena) > maxPooledMembers || cap(p.stack) > maxPooledMembers {
		return
	}
	clear(p.arena)
	clear(p.stack[:cap(p.stack)]) // (a failed parse leaves members there)
	clear(p.at.segs[:cap(p.at.segs)])
	*p = jparser{stack: p.stack[:0], arena: p.arena[:0], at: path{segs: p.at.segs[:0]}}
	parsers.Put(p)
}

// parse parses the compact, valid JSON value b (what names it in errors)
// and returns it as an object (nil when it is not one). The parser's
// scratch space is kept for its next parse.
func (p *jparser) parse(what string, b []byte) (*jobj, error) {
	n := min(bytes.Count(b, []byte{':'}), maxFirstChunk) // about the members
	if cap(p.stack) < min(n, 64) {
		p.stack = make([]jmember, 0, min(n, 64))
	}
	if p.at.segs == nil {
		p.at.segs = make([]segment, 0, 8)
	}
	if cap(p.arena)-len(p.arena) < n {
		p.arena = make([]jmember, 0, n) // (the objects of a parse keep their chunks)
	}
	p.b, p.what = b, what
	p.stack, p.at.segs = p.stack[:0], p.at.segs[:0]
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
		mark := len(p.stack)
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
				p.stack = append(p.stack, jmember{key: decodeKeyBytes(rawKey), val: b[start:end], obj: sub})
			}
			if err := p.r.step(1); err != nil {
				return 0, nil, err
			}
			i = end + 1
			if b[end] == '}' {
				if build {
					o.members = p.take(mark)
				}
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
	escaped, ascii := false, true // (one pass; ASCII needs no UTF-8 check)
	for _, c := range inner {
		if c == '\\' {
			escaped = true
			break
		}
		ascii = ascii && c < utf8.RuneSelf
	}
	if !escaped && (ascii || utf8.Valid(inner)) {
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
	p := newJParser(r)
	defer p.release()
	var tobj *jobj
	if target != nil { // (first: the larger one sizes the scratch space)
		if tobj, err = p.parse("current document", tc); err != nil {
			return nil, err
		}
	}
	pobj, err := p.parse("intent", pc)
	if err != nil {
		return nil, err
	}
	if pobj == nil {
		// A patch that is not an object replaces the document (a copy:
		// pc may be the intent's own bytes).
		return bytes.Clone(pc), nil
	}
	return mergeJSONObject(r, make([]byte, 0, len(tc)+len(pc)), tobj, pobj)
}

// jentry is one member of a merged object: the document's member (nil
// for a new one) and the intent's last member of that name (nil if none).
type jentry struct {
	t, p *jmember
	act  uint8
}

// key returns the member's name.
func (e *jentry) key() []byte {
	if e.t != nil {
		return e.t.key
	}
	return e.p.key
}

// mergeJSONObject appends the merge of patch into target (nil: no object)
// to dst: O(members of both) plus the nested merges.
func mergeJSONObject(r *run, dst []byte, target, patch *jobj) ([]byte, error) {
	var entries []jentry
	var idx index
	if target != nil {
		entries = make([]jentry, 0, len(target.members)+len(patch.members))
		idx = newIndex(len(target.members))
		for k := range target.members {
			m := &target.members[k]
			if i, seen := idx.add(m.key); seen {
				entries[i].t = m
			} else {
				entries = append(entries, jentry{t: m})
			}
			if err := r.step(1); err != nil {
				return nil, err
			}
		}
	} else {
		entries = make([]jentry, 0, len(patch.members))
		idx = newIndex(len(patch.members))
	}
	for k := range patch.members {
		m := &patch.members[k]
		i, found := idx.add(m.key)
		if !found {
			entries = append(entries, jentry{})
		}
		e := &entries[i]
		e.p = m
		switch {
		case isJSONNull(m.val):
			e.act = gone
		case m.obj != nil:
			e.act = merge
		default:
			e.act = replace
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
		dst = appendKey(dst, e.key())
		dst = append(dst, ':')
		switch e.act {
		case keep:
			dst = append(dst, e.t.val...)
		case replace:
			dst = append(dst, e.p.val...)
		case merge:
			var t *jobj
			if e.t != nil {
				t = e.t.obj
			}
			if dst, err = mergeJSONObject(r, dst, t, e.p.obj); err != nil {
				return nil, err
			}
		}
		if err := r.step(1); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}
