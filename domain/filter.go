package domain

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// FilterOp is the operator of one filter node.
type FilterOp uint8

// Filter operators. Their numeric values are part of the cursor binding
// (EncodeFilter) and must never change.
const (
	FilterInvalid FilterOp = iota
	FilterAnd
	FilterOr
	FilterNot
	FilterEq
	FilterNe
	FilterLt
	FilterLte
	FilterGt
	FilterGte
	FilterIn
	FilterExists
	FilterPrefix
)

var filterOpNames = [...]string{"invalid", "and", "or", "not", "eq", "ne", "lt", "lte", "gt", "gte", "in", "exists", "prefix"}

func (o FilterOp) String() string {
	if int(o) < len(filterOpNames) {
		return filterOpNames[o]
	}
	return "invalid"
}

// Filter is one node of a filter tree (docs/query.md):
//   - and, or: Children (and of none is true, or of none is false);
//   - not: exactly one child;
//   - eq, ne, lt, lte, gt, gte: the field at Path compared with Value;
//   - in: the field equals one of Values;
//   - exists: the field is present (Exists true) or absent (false);
//   - prefix: the field is a string starting with Value's string.
type Filter struct {
	Op       FilterOp
	Children []*Filter
	Path     []string
	Value    Value
	Values   []Value
	Exists   bool
}

// Filter limits.
const (
	// MaxFilterNodes bounds the nodes of a tree (in lists count one node
	// per value).
	MaxFilterNodes = 256
	// MaxFilterDepth bounds the nesting of and/or/not.
	MaxFilterDepth = 16
	// MaxFilterPathElements bounds a field path.
	MaxFilterPathElements = 16
	// MaxFilterStringBytes bounds a path element or a string operand.
	MaxFilterStringBytes = 1024
)

// FilterError is an invalid filter: Node is the node's path in the tree
// ("filter", "filter.and[1].not", ...).
type FilterError struct {
	Node    string
	Message string
}

func (e *FilterError) Error() string { return e.Node + ": " + e.Message }

// ValidateFilter checks a filter tree against the language and its limits.
// root names the tree in errors (e.g. "filter").
func ValidateFilter(f *Filter, root string) *FilterError {
	nodes := 0
	return validateFilter(f, root, 0, &nodes)
}

func validateFilter(f *Filter, at string, depth int, nodes *int) *FilterError {
	bad := func(format string, args ...any) *FilterError {
		return &FilterError{Node: at, Message: fmt.Sprintf(format, args...)}
	}
	if f == nil {
		return bad("empty node: set one operator")
	}
	*nodes++
	if *nodes > MaxFilterNodes {
		return bad("the filter has more than %d nodes", MaxFilterNodes)
	}
	if depth > MaxFilterDepth {
		return bad("and/or/not are nested more than %d levels deep", MaxFilterDepth)
	}
	switch f.Op {
	case FilterAnd, FilterOr:
		for i, c := range f.Children {
			if err := validateFilter(c, fmt.Sprintf("%s.%s[%d]", at, f.Op, i), depth+1, nodes); err != nil {
				return err
			}
		}
		return nil
	case FilterNot:
		if len(f.Children) != 1 {
			return bad("not needs exactly one operand")
		}
		return validateFilter(f.Children[0], at+".not", depth+1, nodes)
	case FilterInvalid:
		return bad("empty node: set one operator")
	}
	at += "." + f.Op.String()
	if err := validatePath(f.Path); err != "" {
		return &FilterError{Node: at, Message: err}
	}
	switch f.Op {
	case FilterEq, FilterNe:
		return validateOperand(at, f.Value, true)
	case FilterLt, FilterLte, FilterGt, FilterGte:
		if f.Value.Kind != ValueNumber && f.Value.Kind != ValueString {
			return bad("compares with a number or a string only")
		}
		return validateOperand(at, f.Value, false)
	case FilterPrefix:
		if f.Value.Kind != ValueString {
			return bad("prefix needs a string")
		}
		return validateOperand(at, f.Value, false)
	case FilterIn:
		if len(f.Values) == 0 {
			return bad("in needs at least one value")
		}
		for i, v := range f.Values {
			*nodes++
			if *nodes > MaxFilterNodes {
				return bad("the filter has more than %d nodes", MaxFilterNodes)
			}
			if err := validateOperand(fmt.Sprintf("%s.values[%d]", at, i), v, true); err != nil {
				return err
			}
		}
		return nil
	case FilterExists:
		return nil
	}
	return bad("unknown operator %d", f.Op)
}

func validatePath(p []string) string {
	if len(p) == 0 {
		return "needs a field path"
	}
	if len(p) > MaxFilterPathElements {
		return fmt.Sprintf("field path has %d elements; the limit is %d", len(p), MaxFilterPathElements)
	}
	for i, e := range p {
		switch {
		case e == "":
			return fmt.Sprintf("field path element %d is empty", i)
		case len(e) > MaxFilterStringBytes:
			return fmt.Sprintf("field path element %d is %d bytes; the limit is %d", i, len(e), MaxFilterStringBytes)
		case !utf8.ValidString(e):
			return fmt.Sprintf("field path element %d is not valid UTF-8", i)
		case e[0] == '$' || strings.ContainsAny(e, ".\x00"):
			return fmt.Sprintf("field path element %d must not start with '$' or contain '.' or NUL", i)
		case isDigits(e):
			return fmt.Sprintf("field path element %d is a number; array positions are not supported (arrays match when some element matches)", i)
		}
	}
	return ""
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func validateOperand(at string, v Value, nullOK bool) *FilterError {
	switch v.Kind {
	case ValueNull:
		if nullOK {
			return nil
		}
	case ValueBool:
		if nullOK {
			return nil
		}
	case ValueNumber:
		if v.IsFloat && (math.IsNaN(v.Float) || math.IsInf(v.Float, 0)) {
			return &FilterError{Node: at, Message: "numbers must be finite"}
		}
		return nil
	case ValueString:
		if len(v.Str) > MaxFilterStringBytes {
			return &FilterError{Node: at, Message: fmt.Sprintf("string is %d bytes; the limit is %d", len(v.Str), MaxFilterStringBytes)}
		}
		if !utf8.ValidString(v.Str) {
			return &FilterError{Node: at, Message: "string is not valid UTF-8"}
		}
		return nil
	}
	return &FilterError{Node: at, Message: "operand must be null, a boolean, a number or a string"}
}

// PathString renders a field path for messages.
func PathString(p []string) string { return strings.ToValidUTF8(strings.Join(p, "."), "\uFFFD") }

// resolve returns the values at path p in doc and whether the path exists.
// Objects are entered by field name; an array on the way is entered
// element by element (its object elements), so that a path reaches every
// object of an array. The values are those reached plus, for each array
// reached, its elements ("some element matches").
func resolve(doc *Value, p []string) (cands []*Value, exists bool) {
	cur := []*Value{doc}
	for _, name := range p {
		var next []*Value
		for _, v := range cur {
			switch v.Kind {
			case ValueObject:
				if f, ok := v.Lookup(name); ok {
					next = append(next, f)
				}
			case ValueArray:
				for i := range v.Elems {
					if e := &v.Elems[i]; e.Kind == ValueObject {
						if f, ok := e.Lookup(name); ok {
							next = append(next, f)
						}
					}
				}
			}
		}
		if len(next) == 0 {
			return nil, false
		}
		cur = next
	}
	for _, v := range cur {
		cands = append(cands, v)
		if v.Kind == ValueArray {
			for i := range v.Elems {
				cands = append(cands, &v.Elems[i])
			}
		}
	}
	return cands, true
}

// CompareValues compares two scalar values of the same type bracket: ok
// is false when they are in different brackets (a number and a string, a
// boolean and null, ...) or are not scalars. Numbers compare numerically
// whatever their encoding (int32, int64, double), NaN below every other
// number; strings by the bytes of their UTF-8; false before true.
func CompareValues(a, b *Value) (int, bool) {
	if a.Kind != b.Kind {
		return 0, false
	}
	switch a.Kind {
	case ValueNull:
		return 0, true
	case ValueBool:
		switch {
		case a.Bool == b.Bool:
			return 0, true
		case !a.Bool:
			return -1, true
		}
		return 1, true
	case ValueString:
		return strings.Compare(a.Str, b.Str), true
	case ValueNumber:
		return compareNumbers(a, b), true
	}
	return 0, false
}

func compareNumbers(a, b *Value) int {
	switch {
	case !a.IsFloat && !b.IsFloat:
		return cmp.Compare(a.Int, b.Int)
	case a.IsFloat && b.IsFloat:
		return cmpFloat(a.Float, b.Float)
	case a.IsFloat:
		return -compareIntFloat(b.Int, a.Float)
	}
	return compareIntFloat(a.Int, b.Float)
}

func cmpFloat(x, y float64) int {
	xn, yn := math.IsNaN(x), math.IsNaN(y)
	switch {
	case xn && yn:
		return 0
	case xn:
		return -1
	case yn:
		return 1
	}
	return cmp.Compare(x, y)
}

// compareIntFloat compares an int64 with a double exactly.
func compareIntFloat(i int64, f float64) int {
	switch {
	case math.IsNaN(f):
		return 1
	case f >= 9223372036854775808.0:
		return -1
	case f < -9223372036854775808.0:
		return 1
	}
	t := math.Trunc(f)
	if c := cmp.Compare(i, int64(t)); c != 0 {
		return c
	}
	return cmpFloat(0, f-t)
}

// Match evaluates the filter on a decoded document: the reference
// semantics every adapter must reproduce (docs/query.md).
func (f *Filter) Match(doc *Value) bool {
	switch f.Op {
	case FilterAnd:
		for _, c := range f.Children {
			if !c.Match(doc) {
				return false
			}
		}
		return true
	case FilterOr:
		for _, c := range f.Children {
			if c.Match(doc) {
				return true
			}
		}
		return false
	case FilterNot:
		return !f.Children[0].Match(doc)
	case FilterNe:
		return !matchEq(doc, f.Path, &f.Value)
	case FilterEq:
		return matchEq(doc, f.Path, &f.Value)
	case FilterIn:
		for i := range f.Values {
			if matchEq(doc, f.Path, &f.Values[i]) {
				return true
			}
		}
		return false
	case FilterExists:
		_, ok := resolve(doc, f.Path)
		return ok == f.Exists
	}
	cands, _ := resolve(doc, f.Path)
	for _, c := range cands {
		if f.Op == FilterPrefix {
			if c.Kind == ValueString && strings.HasPrefix(c.Str, f.Value.Str) {
				return true
			}
			continue
		}
		r, ok := CompareValues(c, &f.Value)
		if !ok {
			continue
		}
		switch f.Op {
		case FilterLt:
			ok = r < 0
		case FilterLte:
			ok = r <= 0
		case FilterGt:
			ok = r > 0
		case FilterGte:
			ok = r >= 0
		}
		if ok {
			return true
		}
	}
	return false
}

// matchEq: some value at the path equals lit; a null literal also matches
// a missing field.
func matchEq(doc *Value, p []string, lit *Value) bool {
	cands, exists := resolve(doc, p)
	if !exists && lit.Kind == ValueNull {
		return true
	}
	for _, c := range cands {
		if r, ok := CompareValues(c, lit); ok && r == 0 {
			return true
		}
	}
	return false
}

// AppendFilter appends a deterministic binary encoding of the filter (nil:
// one zero byte). Equal trees encode equally; it binds cursors to their
// filter.
func AppendFilter(b []byte, f *Filter) []byte {
	if f == nil {
		return append(b, 0)
	}
	b = append(b, byte(f.Op))
	b = appendUvarint(b, uint64(len(f.Children)))
	for _, c := range f.Children {
		b = AppendFilter(b, c)
	}
	b = appendUvarint(b, uint64(len(f.Path)))
	for _, p := range f.Path {
		b = appendStr(b, p)
	}
	b = appendScalar(b, &f.Value)
	b = appendUvarint(b, uint64(len(f.Values)))
	for i := range f.Values {
		b = appendScalar(b, &f.Values[i])
	}
	if f.Exists {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendUvarint(b []byte, u uint64) []byte {
	for u >= 0x80 {
		b = append(b, byte(u)|0x80)
		u >>= 7
	}
	return append(b, byte(u))
}

func appendStr(b []byte, s string) []byte {
	b = appendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendScalar(b []byte, v *Value) []byte {
	b = append(b, byte(v.Kind))
	switch v.Kind {
	case ValueBool:
		if v.Bool {
			return append(b, 1)
		}
		return append(b, 0)
	case ValueNumber:
		if v.IsFloat {
			return appendStr(append(b, 'f'), strconv.FormatFloat(v.Float, 'g', -1, 64))
		}
		return appendStr(append(b, 'i'), strconv.FormatInt(v.Int, 10))
	case ValueString:
		return appendStr(b, v.Str)
	}
	return b
}
