// Package declarative implements merge profiles declared in a file: an
// ordered list of rules over JSON Pointer paths, with values and conditions
// written in CEL. See docs/profiles.md.
package declarative

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

var (
	_ ports.MergeProfile         = (*Profile)(nil)
	_ ports.FingerprintedProfile = (*Profile)(nil)
	_ ports.ProfileOrigin        = (*Profile)(nil)
)

// Profile is one compiled declarative profile. It is safe for concurrent use.
type Profile struct {
	def         Definition
	initial     *object
	rules       []*rule
	limits      Limits
	fingerprint string
	origin      string
}

type rule struct {
	index int
	def   RuleDefinition
	path  []string
	key   *expr
	value *expr
	when  *expr
	check *expr
}

func newProfile(def Definition, initial *object, rules []*rule, limits Limits) *Profile {
	return &Profile{def: def, initial: initial, rules: rules, limits: limits, fingerprint: fingerprint(def)}
}

// Name implements ports.MergeProfile.
func (p *Profile) Name() string { return p.def.Name }

// ContentTypes implements ports.MergeProfile.
func (p *Profile) ContentTypes() []string { return append([]string(nil), p.def.ContentTypes...) }

// Fingerprint identifies the profile's definition: "sha256:" and the hex
// SHA-256 of its canonical encoding.
func (p *Profile) Fingerprint() string { return p.fingerprint }

// Origin says where the profile is defined: "file FILE, line N".
func (p *Profile) Origin() string { return p.origin }

// Definition returns the profile's canonical definition.
func (p *Profile) Definition() Definition { return p.def }

func (p *Profile) declares(ct string) bool {
	for _, d := range p.def.ContentTypes {
		if domain.IsMediaType(ct, d) {
			return true
		}
	}
	return false
}

func accepts(accept []string, mt string) bool {
	for _, a := range accept {
		if domain.IsMediaType(a, mt) {
			return true
		}
	}
	return len(accept) == 0
}

func (p *Profile) invalid(format string, args ...any) error {
	return domain.Errorf(domain.CodeInvalidArgument, "profile %q: %s", p.def.Name, strings.ToValidUTF8(fmt.Sprintf(format, args...), "\uFFFD"))
}

func (p *Profile) parse(what string, d domain.Document) (*object, error) {
	switch {
	case domain.IsMediaType(d.ContentType, domain.ContentTypeBSON) && p.declares(domain.ContentTypeBSON):
		return parseBSON(what, d.Data, p.limits.MaxDepth)
	case domain.IsMediaType(d.ContentType, domain.ContentTypeJSON) && p.declares(domain.ContentTypeJSON):
		v, err := parseJSON(what, d.Data, p.limits.MaxDepth)
		if err != nil {
			return nil, err
		}
		o, ok := v.(*object)
		if !ok {
			return nil, inputErrorf("%s: must be a JSON object", what)
		}
		return o, nil
	}
	return nil, inputErrorf("%s: content type %q is not one of %s", what, d.ContentType, strings.Join(p.def.ContentTypes, ", "))
}

// Merge implements ports.MergeProfile. The result has the current
// document's content type; for an absent record, the intent's when the
// store accepts it, else the first declared type the store accepts.
func (p *Profile) Merge(ctx context.Context, in ports.MergeInput) (domain.Document, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	doc, err := p.merge(ctx, in)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return domain.Document{}, err
		}
		var e *domain.Error
		if errors.As(err, &e) {
			return domain.Document{}, e
		}
		return domain.Document{}, p.invalid("%v", err)
	}
	return doc, nil
}

// Apply runs one merge of the record at addr without a store: current is
// nil for an absent record. The sink profiles apply command uses it.
func (p *Profile) Apply(ctx context.Context, addr domain.Address, current *domain.Document, intent domain.Document) (domain.Document, error) {
	return p.Merge(ctx, ports.MergeInput{Address: addr, Current: current, Intent: intent})
}

func (p *Profile) outputType(in ports.MergeInput) (string, error) {
	if in.Current != nil {
		return in.Current.ContentType, nil
	}
	if p.declares(in.Intent.ContentType) && accepts(in.Accept, in.Intent.ContentType) {
		return in.Intent.ContentType, nil
	}
	for _, ct := range p.def.ContentTypes {
		if accepts(in.Accept, ct) {
			return ct, nil
		}
	}
	return "", inputErrorf("the store holds only %s documents, and the profile creates %s", strings.Join(in.Accept, ", "), strings.Join(p.def.ContentTypes, ", "))
}

func (p *Profile) merge(ctx context.Context, in ports.MergeInput) (domain.Document, error) {
	outType, err := p.outputType(in)
	if err != nil {
		return domain.Document{}, err
	}
	intent, err := p.parse("intent", in.Intent)
	if err != nil {
		return domain.Document{}, err
	}
	var doc *object
	switch {
	case in.Current != nil:
		if doc, err = p.parse("current document", *in.Current); err != nil {
			return domain.Document{}, err
		}
	case p.initial != nil:
		doc = deepCopy(p.initial).(*object)
	default:
		doc = newObject(0)
	}
	st := &evalState{ctx: ctx, budget: p.limits.MaxCost, maxItems: p.limits.MaxItems, maxDepth: p.limits.MaxDepth}
	addr := in.Address
	st.vars = map[string]any{
		"current": lazy(doc),
		"intent":  lazy(intent),
		"address": map[string]any{"store": addr.Store, "namespace": addr.Namespace, "dataset": addr.Dataset, "key": addr.Key.String(), "key_kind": addr.Key.Kind.String()},
	}
	// Evaluate every expression first: they all see the record as it was
	// before the merge (current) and the intent, whatever the rules before
	// them change.
	type step struct {
		r     *rule
		path  []string
		value any
	}
	steps := make([]step, 0, len(p.rules))
	for _, r := range p.rules {
		s, skip, err := p.evaluate(st, r)
		if err != nil {
			return domain.Document{}, p.ruleError(r, err)
		}
		if !skip {
			steps = append(steps, step{r, s.path, s.value})
		}
	}
	var root any = doc
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return domain.Document{}, err
		}
		if root, err = apply(root, s.r, s.path, s.value, p.limits); err != nil {
			return domain.Document{}, p.ruleError(s.r, err)
		}
	}
	out, ok := root.(*object)
	if !ok {
		return domain.Document{}, inputErrorf("result: the document must stay an object")
	}
	if d := depthOf(out, p.limits.MaxDepth); d > p.limits.MaxDepth {
		return domain.Document{}, inputErrorf("result: nested deeper than %d levels", p.limits.MaxDepth)
	}
	var data []byte
	if domain.IsMediaType(outType, domain.ContentTypeBSON) {
		data, err = encodeBSON(out)
	} else {
		data, err = appendJSON(make([]byte, 0, len(in.Intent.Data)+256), out)
	}
	if err != nil {
		return domain.Document{}, err
	}
	if len(data) > p.limits.MaxDocumentBytes {
		return domain.Document{}, inputErrorf("result: %d bytes, more than the limit of %d", len(data), p.limits.MaxDocumentBytes)
	}
	return domain.Document{ContentType: outType, Data: data}, nil
}

type evaluated struct {
	path  []string
	value any
}

func (p *Profile) evaluate(st *evalState, r *rule) (evaluated, bool, error) {
	var ev evaluated
	if r.when != nil {
		ok, err := st.evalBool(r.when)
		if err != nil {
			return ev, false, fieldError("when", err)
		}
		if !ok {
			return ev, true, nil
		}
	}
	if r.check != nil {
		ok, err := st.evalBool(r.check)
		if err != nil {
			return ev, false, fieldError("check", err)
		}
		if !ok {
			msg := r.def.Message
			if msg == "" {
				msg = "the condition " + strconv.Quote(oneLine(r.def.Check)) + " does not hold"
			}
			return ev, false, inputErrorf("%s", msg)
		}
		return ev, true, nil
	}
	ev.path = r.path
	if r.key != nil {
		v, err := st.eval(r.key)
		if err != nil {
			return ev, false, fieldError("key", err)
		}
		seg, err := segmentOf(v.Value())
		if err != nil {
			return ev, false, fieldError("key", err)
		}
		ev.path = append(append(make([]string, 0, len(r.path)+1), r.path...), seg)
	}
	if r.value != nil {
		v, err := st.eval(r.value)
		if err != nil {
			return ev, false, fieldError("value", err)
		}
		if ev.value, err = st.fromCEL(v); err != nil {
			return ev, false, fieldError("value", err)
		}
	}
	return ev, false, nil
}

func segmentOf(v any) (string, error) {
	switch k := v.(type) {
	case string:
		if k == "" {
			return "", inputErrorf("the key is empty")
		}
		return k, nil
	case int64:
		if k < 0 {
			return "", inputErrorf("the key is a negative number")
		}
		return strconv.FormatInt(k, 10), nil
	}
	return "", inputErrorf("the key must be a string or an int")
}

func fieldError(field string, err error) error {
	var in *errInput
	if errors.As(err, &in) {
		return inputErrorf("%s: %s", field, in.msg)
	}
	return err
}

func (p *Profile) ruleError(r *rule, err error) error {
	var in *errInput
	if !errors.As(err, &in) {
		return err
	}
	where := r.def.Op
	if r.def.Path != "" {
		where += " " + r.def.Path
	}
	return p.invalid("rules[%d] (%s): %s", r.index, where, in.msg)
}

// apply runs one rule on the document.
func apply(root any, r *rule, path []string, v any, limits Limits) (any, error) {
	old, exists := get(root, path)
	switch r.def.Op {
	case "set":
		return setAt(root, path, v, nil)
	case "set_if_absent":
		if exists {
			return root, nil
		}
		return setAt(root, path, v, nil)
	case "remove":
		return removeAt(root, path), nil
	case "add", "max", "min":
		if !exists || old == nil {
			if _, err := number(v); err != nil && r.def.Op == "add" {
				return nil, err
			}
			return setAt(root, path, v, nil)
		}
		nv, err := arith(r.def.Op, old, v)
		if err != nil {
			return nil, err
		}
		return setAt(root, path, nv, nil)
	case "append", "add_to_set", "remove_from_set":
		var arr []any
		if exists && old != nil {
			a, ok := old.([]any)
			if !ok {
				return nil, inputErrorf("the stored value is %s, not an array", kindName(old))
			}
			arr = a
		}
		switch r.def.Op {
		case "remove_from_set":
			if !exists {
				return root, nil
			}
			out := arr[:0:0]
			for _, e := range arr {
				if !equal(e, v) {
					out = append(out, e)
				}
			}
			return setAt(root, path, out, nil)
		case "add_to_set":
			for _, e := range arr {
				if equal(e, v) {
					return root, nil
				}
			}
			if r.def.MaxItems > 0 && len(arr) >= r.def.MaxItems {
				return nil, inputErrorf("the set is full (max_items %d)", r.def.MaxItems)
			}
		case "append":
			if len(arr) >= r.def.MaxItems {
				switch r.def.Drop {
				case "newest":
					return root, nil
				case "error":
					return nil, inputErrorf("the array is full (max_items %d)", r.def.MaxItems)
				default: // oldest
					arr = append(arr[:0:0], arr[len(arr)-r.def.MaxItems+1:]...)
				}
			}
		}
		return setAt(root, path, append(arr, v), nil)
	case "merge_patch":
		pm, ok := v.(*object)
		if !ok {
			return nil, inputErrorf("the value is %s, not a map (a merge patch)", kindName(v))
		}
		target := old
		if !exists {
			target = nil
		}
		return setAt(root, path, mergePatch(target, pm), nil)
	}
	return nil, inputErrorf("unknown operation")
}

// mergePatch applies an RFC 7396 merge patch.
func mergePatch(target any, patch *object) any {
	t, ok := target.(*object)
	if !ok {
		t = newObject(len(patch.keys))
	}
	for _, k := range patch.keys {
		pv := patch.vals[k]
		if pv == nil {
			t.remove(k)
			continue
		}
		if po, ok := pv.(*object); ok {
			cur, _ := t.get(k)
			t.set(k, mergePatch(cur, po))
			continue
		}
		t.set(k, pv)
	}
	return t
}

// num is a number in its stored type.
type num struct {
	kind byte // 'i' int32, 'l' int64, 'd' double
	i    int64
	f    float64
}

func number(v any) (num, error) {
	switch x := v.(type) {
	case int32:
		return num{kind: 'i', i: int64(x)}, nil
	case int64:
		return num{kind: 'l', i: x}, nil
	case float64:
		return num{kind: 'd', f: x}, nil
	case jsonNumber:
		n, err := numberValue(x)
		if err != nil {
			return num{}, err
		}
		return number(n)
	}
	return num{}, inputErrorf("%s is not a number", kindName(v))
}

func (n num) float() float64 {
	if n.kind == 'd' {
		return n.f
	}
	return float64(n.i)
}

// asKind converts n to the stored kind k, or fails.
func (n num) asKind(k byte) (any, error) {
	switch k {
	case 'd':
		return n.float(), nil
	}
	i := n.i
	if n.kind == 'd' {
		if n.f != math.Trunc(n.f) || n.f < -9.2e18 || n.f > 9.2e18 {
			return nil, inputErrorf("the stored value is an integer and the value is not")
		}
		i = int64(n.f)
	}
	if k == 'i' {
		if i < math.MinInt32 || i > math.MaxInt32 {
			return nil, inputErrorf("the result overflows the stored 32-bit integer")
		}
		return int32(i), nil
	}
	return i, nil
}

func arith(op string, old, v any) (any, error) {
	if op != "add" {
		if os, ok := old.(string); ok {
			vs, ok := v.(string)
			if !ok {
				return nil, inputErrorf("the stored value is a string and the value is %s", kindName(v))
			}
			if op == "max" && vs > os || op == "min" && vs < os {
				return vs, nil
			}
			return os, nil
		}
	}
	a, err := number(old)
	if err != nil {
		return nil, inputErrorf("the stored value is %s, not a number", kindName(old))
	}
	b, err := number(v)
	if err != nil {
		return nil, inputErrorf("the value is %s, not a number", kindName(v))
	}
	switch op {
	case "max", "min":
		less, greater := b.float() < a.float(), b.float() > a.float()
		if a.kind != 'd' && b.kind != 'd' {
			less, greater = b.i < a.i, b.i > a.i
		}
		if op == "max" && greater || op == "min" && less {
			return b.asKind(a.kind)
		}
		return old, nil
	}
	if a.kind == 'd' {
		s := a.f + b.float()
		if math.IsInf(s, 0) {
			return nil, inputErrorf("the sum overflows a double")
		}
		return s, nil
	}
	bi, err := b.asKind('l')
	if err != nil {
		return nil, err
	}
	d := bi.(int64)
	s := a.i + d
	if d > 0 && s < a.i || d < 0 && s > a.i {
		return nil, inputErrorf("the sum overflows the stored 64-bit integer")
	}
	return num{kind: 'l', i: s}.asKind(a.kind)
}

// equal compares document values: numbers by value, objects regardless of
// key order.
func equal(a, b any) bool {
	switch x := a.(type) {
	case *object:
		y, ok := b.(*object)
		if !ok || len(x.keys) != len(y.keys) {
			return false
		}
		for k, v := range x.vals {
			w, ok := y.vals[k]
			if !ok || !equal(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case int32, int64, float64, jsonNumber:
		na, err1 := number(a)
		nb, err2 := number(b)
		if err1 != nil || err2 != nil {
			return false
		}
		if na.kind != 'd' && nb.kind != 'd' {
			return na.i == nb.i
		}
		return na.float() == nb.float()
	}
	switch y := b.(type) {
	case *object, []any, int32, int64, float64, jsonNumber:
		return false
	case bson.RawValue:
		x, ok := a.(bson.RawValue)
		return ok && x.Type == y.Type && bytes.Equal(x.Value, y.Value)
	case nil, bool, string:
		return a == y
	}
	if _, ok := a.(bson.RawValue); ok {
		return false
	}
	ta, ok1 := a.(interface{ Equal(time.Time) bool })
	tb, ok2 := b.(time.Time)
	return ok1 && ok2 && ta.Equal(tb)
}

// lazy converts a document for CEL on first use.
func lazy(v any) func() any {
	var c any
	return func() any {
		if c == nil {
			c = toCEL(v)
		}
		return c
	}
}
