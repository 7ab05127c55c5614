package mergepatch

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DefaultMaxDepth is the default nesting limit: MongoDB's own limit of 100
// levels of nested documents and arrays.
const DefaultMaxDepth = 100

// MaxMaxDepth is the largest nesting limit the profile accepts (the limit
// of encoding/json's own scanner).
const MaxMaxDepth = 10000

// checkEvery is how many units of work (members parsed, merged or written)
// pass between two looks at the context.
const checkEvery = 4096

// run is one merge: its context, its nesting limit and its work counter.
type run struct {
	ctx      context.Context
	maxDepth int
	work     int // units of work done: members parsed, looked up, written
	next     int // work at which the context is looked at next
}

func newRun(ctx context.Context, maxDepth int) *run {
	if ctx == nil {
		ctx = context.Background()
	}
	return &run{ctx: ctx, maxDepth: clampDepth(maxDepth), next: checkEvery}
}

func clampDepth(d int) int {
	switch {
	case d <= 0:
		return DefaultMaxDepth
	case d > MaxMaxDepth:
		return MaxMaxDepth
	}
	return d
}

// step counts n units of work and returns the context's error once it is done.
func (r *run) step(n int) error {
	r.work += n
	if r.work < r.next {
		return nil
	}
	r.next = r.work + checkEvery
	return r.ctx.Err()
}

// inputError is a problem of one of the merge's inputs ("intent" or
// "current document"). Its message names the input, the path and the
// problem, never a value.
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }

func inputErrorf(format string, args ...any) error {
	return &inputError{msg: fmt.Sprintf(format, args...)}
}

// Bounds of the paths in error messages.
const (
	maxSegmentBytes = 32
	maxPathBytes    = 160
)

// segment is one level of a path: a member name (a raw JSON string token
// or a raw BSON key) or an array index.
type segment struct {
	key   []byte
	json  bool // key is a JSON string token, quotes and escapes included
	index int
}

// path is the position of a value being parsed: one segment per level.
// Segments keep their raw bytes; they are decoded only for a message.
type path struct{ segs []segment }

func (p *path) pushKey(raw []byte, json bool) { p.segs = append(p.segs, segment{key: raw, json: json}) }
func (p *path) pushIndex(i int)               { p.segs = append(p.segs, segment{index: i}) }
func (p *path) pop()                          { p.segs = p.segs[:len(p.segs)-1] }

// String renders the path as a JSON Pointer (RFC 6901), each segment and
// the whole shortened to a bounded length, valid UTF-8 and free of control
// characters.
func (p *path) String() string {
	if len(p.segs) == 0 {
		return "/"
	}
	var sb strings.Builder
	for _, seg := range p.segs {
		if sb.Len() >= maxPathBytes {
			fmt.Fprintf(&sb, "/… (%d levels)", len(p.segs))
			break
		}
		sb.WriteByte('/')
		var s string
		switch {
		case seg.key == nil:
			s = strconv.Itoa(seg.index)
		case seg.json:
			s = decodeKey(seg.key)
		default:
			s = string(seg.key)
		}
		sb.WriteString(pointerSegment(s))
	}
	return sb.String()
}

func pointerSegment(s string) string {
	if len(s) > 4*maxSegmentBytes {
		s = s[:4*maxSegmentBytes]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
	if len(s) > maxSegmentBytes {
		cut := maxSegmentBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return '?'
		}
		return r
	}, s)
}

// tooDeep is the error for a value nested deeper than the limit.
func tooDeep(what string, max int, at *path) error {
	return inputErrorf("%s: nesting depth exceeds %d levels at %s", what, max, at)
}

// index finds the entries of one object level by member name: a linear scan
// while the level is small, then an open-addressing hash table over the
// names' bytes (no copies, no allocation per name). Adding and finding are
// O(1) amortized, so merging a level is linear in its size.
type index struct {
	keys   [][]byte // by position
	hashes []uint32 // by position, once the table exists
	slots  []uint32 // position+1; 0 is empty
	mask   uint32
}

const smallLevel = 16

var hashSeed = maphash.MakeSeed()

// newIndex returns an index for about n names.
func newIndex(n int) index {
	x := index{keys: make([][]byte, 0, n)}
	if n > smallLevel {
		x.hashes = make([]uint32, 0, n)
		x.resize(n)
	}
	return x
}

// resize makes a table for n names at a load of at most 3/4 and fills it.
func (x *index) resize(n int) {
	size := 64
	for size < n+n/3+1 {
		size *= 2
	}
	x.slots, x.mask = make([]uint32, size), uint32(size-1)
	for i, k := range x.keys {
		if i == len(x.hashes) {
			x.hashes = append(x.hashes, uint32(maphash.Bytes(hashSeed, k)))
		}
		x.insert(x.hashes[i], i)
	}
}

func (x *index) insert(h uint32, pos int) {
	for i := h & x.mask; ; i = (i + 1) & x.mask {
		if x.slots[i] == 0 {
			x.slots[i] = uint32(pos + 1)
			return
		}
	}
}

// lookup returns the position of key, or -1, and key's hash.
func (x *index) lookup(key []byte) (int, uint32) {
	if x.slots == nil {
		for i, k := range x.keys {
			if bytes.Equal(k, key) {
				return i, 0
			}
		}
		return -1, 0
	}
	h := uint32(maphash.Bytes(hashSeed, key))
	for i := h & x.mask; ; i = (i + 1) & x.mask {
		s := x.slots[i]
		if s == 0 {
			return -1, h
		}
		if pos := int(s - 1); x.hashes[pos] == h && bytes.Equal(x.keys[pos], key) {
			return pos, h
		}
	}
}

// add returns the position of key, adding it at the end when it is new.
func (x *index) add(key []byte) (int, bool) {
	pos, h := x.lookup(key)
	if pos >= 0 {
		return pos, true
	}
	pos = len(x.keys)
	x.keys = append(x.keys, key)
	switch {
	case x.slots == nil:
		if len(x.keys) > smallLevel {
			x.resize(2 * len(x.keys))
		}
	case 4*len(x.keys) > 3*len(x.slots):
		x.resize(2 * len(x.keys))
	default:
		x.hashes = append(x.hashes, h)
		x.insert(h, pos)
	}
	return pos, false
}

func (x *index) find(key []byte) (int, bool) {
	pos, _ := x.lookup(key)
	return pos, pos >= 0
}

// The pending action on one member of a merged object. A later occurrence
// of the same name in the intent replaces the action of an earlier one, so
// a repeated name counts once, with its last value, at its first position.
const (
	keep    uint8 = iota // the document's member, as it is
	gone                 // removed (null in the intent)
	replace              // the intent's value
	merge                // the intent's object merged into the document's
)
