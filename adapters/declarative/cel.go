package declarative

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// newEnv is the CEL environment of every expression: the standard library
// only (no extensions: nothing reads the clock, randomness or the
// environment), and three variables.
func newEnv() (*cel.Env, error) {
	obj := cel.MapType(cel.StringType, cel.DynType)
	env, err := cel.NewEnv(
		cel.Variable("current", obj),
		cel.Variable("intent", obj),
		cel.Variable("address", obj),
	)
	if err != nil {
		return nil, fmt.Errorf("cannot create the CEL environment: %w", err)
	}
	return env, nil
}

type expr struct {
	src string
	prg cel.Program
}

// compileExpr parses and type-checks src; want, when set, is the type the
// expression must have (dyn is accepted and checked at run time).
func compileExpr(env *cel.Env, src string, want *cel.Type, maxCost uint64) (*expr, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("empty expression")
	}
	ast, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("invalid CEL: %s", oneLine(iss.Err().Error()))
	}
	if want != nil && !ast.OutputType().IsExactType(want) && !ast.OutputType().IsExactType(cel.DynType) {
		return nil, fmt.Errorf("the expression has type %s, want %s", ast.OutputType(), want)
	}
	prg, err := env.Program(ast,
		cel.CostLimit(maxCost),
		cel.EvalOptions(cel.OptTrackCost),
		cel.InterruptCheckFrequency(64),
	)
	if err != nil {
		return nil, fmt.Errorf("cannot compile CEL: %s", oneLine(err.Error()))
	}
	return &expr{src: src, prg: prg}, nil
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// evalState carries one merge's CEL variables and cost budget.
type evalState struct {
	ctx      context.Context
	vars     map[string]any
	budget   uint64
	maxItems int
	maxDepth int
}

func (s *evalState) eval(e *expr) (ref.Val, error) {
	if err := s.ctx.Err(); err != nil {
		return nil, err
	}
	v, det, err := e.prg.ContextEval(s.ctx, s.vars)
	if det != nil && det.ActualCost() != nil {
		c := *det.ActualCost()
		if c > s.budget {
			return nil, inputErrorf("the expressions of this merge exceed the cost limit")
		}
		s.budget -= c
	}
	if err != nil {
		if cerr := s.ctx.Err(); cerr != nil {
			return nil, cerr
		}
		if strings.Contains(err.Error(), "cost limit") {
			return nil, inputErrorf("the expressions of this merge exceed the cost limit")
		}
		return nil, inputErrorf("evaluation failed: %s", runtimeError(err, e.src))
	}
	return v, nil
}

// runtimeError renders an evaluation error without quoting values from
// the documents: the classes CEL reports, and a missing key only when the
// expression names it.
func runtimeError(err error, src string) string {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "no such key: "):
		k := strings.TrimPrefix(msg, "no such key: ")
		if isIdent(k) && strings.Contains(src, k) {
			return "no such key: " + k + " (use has() for optional fields)"
		}
		return "no such key"
	case strings.HasPrefix(msg, "no such overload"):
		if !strings.ContainsAny(msg, "'\"`") {
			return oneLine(msg)
		}
		return "no such overload"
	case strings.HasPrefix(msg, "index out of range"):
		return "index out of range"
	case msg == "division by zero", msg == "modulus by zero", strings.Contains(msg, "overflow"):
		return msg
	}
	return "the expression failed at run time"
}

func isIdent(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func (s *evalState) evalBool(e *expr) (bool, error) {
	v, err := s.eval(e)
	if err != nil {
		return false, err
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, inputErrorf("the condition is a %s, not a bool", v.Type().TypeName())
	}
	return bool(b), nil
}

// toCEL converts a document value into CEL's native form.
func toCEL(v any) any {
	switch x := v.(type) {
	case *object:
		m := make(map[string]any, len(x.keys))
		for k, vv := range x.vals {
			m[k] = toCEL(vv)
		}
		return m
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = toCEL(e)
		}
		return a
	case nil:
		return types.NullValue
	case int32:
		return int64(x)
	case jsonNumber:
		n, err := numberValue(x)
		if err != nil {
			return types.NullValue
		}
		return n
	case bson.RawValue:
		switch x.Type {
		case bson.TypeObjectID:
			return x.ObjectID().Hex()
		case bson.TypeDateTime:
			return x.Time().UTC()
		}
		return types.NullValue
	}
	return v
}

// fromCEL converts an expression's result into a document value, within
// the depth and item limits.
func (s *evalState) fromCEL(v ref.Val) (any, error) {
	items := 0
	return fromCELValue(v, 0, s.maxDepth, s.maxItems, &items)
}

func fromCELValue(v ref.Val, depth, maxDepth, maxItems int, items *int) (any, error) {
	*items++
	if *items > maxItems {
		return nil, inputErrorf("the value has more than %d items", maxItems)
	}
	switch x := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(x), nil
	case types.Int:
		return int64(x), nil
	case types.Uint:
		if uint64(x) > math.MaxInt64 {
			return nil, inputErrorf("the value %d is out of the int64 range", uint64(x))
		}
		return int64(x), nil
	case types.Double:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil, inputErrorf("the value is not a finite number")
		}
		return float64(x), nil
	case types.String:
		return string(x), nil
	case types.Timestamp:
		return x.Time.UTC().Truncate(time.Millisecond), nil
	}
	if depth >= maxDepth+1 {
		return nil, inputErrorf("the value is nested deeper than %d levels", maxDepth)
	}
	switch x := v.(type) {
	case traits.Mapper:
		var keys []string
		it := x.Iterator()
		for it.HasNext() == types.True {
			k, ok := it.Next().(types.String)
			if !ok {
				return nil, inputErrorf("map keys must be strings")
			}
			keys = append(keys, string(k))
			if len(keys) > maxItems {
				return nil, inputErrorf("the value has more than %d items", maxItems)
			}
		}
		sort.Strings(keys)
		o := newObject(len(keys))
		for _, k := range keys {
			e, err := fromCELValue(x.Get(types.String(k)), depth+1, maxDepth, maxItems, items)
			if err != nil {
				return nil, err
			}
			o.set(k, e)
		}
		return o, nil
	case traits.Lister:
		n, ok := x.Size().(types.Int)
		if !ok || int(n) > maxItems {
			return nil, inputErrorf("the value has more than %d items", maxItems)
		}
		a := make([]any, 0, int(n))
		for i := 0; i < int(n); i++ {
			e, err := fromCELValue(x.Get(types.Int(i)), depth+1, maxDepth, maxItems, items)
			if err != nil {
				return nil, err
			}
			a = append(a, e)
		}
		return a, nil
	}
	if types.IsError(v) {
		return nil, inputErrorf("evaluation failed")
	}
	return nil, inputErrorf("a CEL %s cannot be stored in a document", v.Type().TypeName())
}
