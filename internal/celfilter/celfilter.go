// Package celfilter compiles the text form of Sink's filter language, a
// restricted CEL expression over the variable doc, to the filter tree
// (domain.Filter). The subset (docs/query.md):
//
//	doc.a.b == 1, !=, <, <=, >, >=   a field compared with a literal (either side)
//	doc["a b"]                        a field name that is not an identifier
//	doc.s.startsWith("pre")           string prefix
//	doc.a in [1, "x", null]           one of the literals
//	has(doc.a.b)                      the field exists
//	&&, ||, !, parentheses
//
// Literals are null, booleans, integers, doubles and strings. Anything
// else is an error giving its position (line:column).
package celfilter

import (
	"fmt"
	"math"
	"strings"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"

	"github.com/sink-io/sink/domain"
)

// MaxExpressionBytes bounds an expression.
const MaxExpressionBytes = 16 << 10

var env = func() *cel.Env {
	e, err := cel.NewEnv(cel.Variable("doc", cel.DynType))
	if err != nil {
		panic(err)
	}
	return e
}()

// Error is an expression outside the subset, at Line:Column (1-based).
type Error struct {
	Line, Column int
	Message      string
}

func (e *Error) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Column, e.Message) }

// Compile compiles a restricted CEL expression to a filter tree. The tree
// is checked against the language's limits (domain.ValidateFilter) too.
func Compile(src string) (*domain.Filter, error) {
	if len(src) > MaxExpressionBytes {
		return nil, &Error{Line: 1, Column: 1, Message: fmt.Sprintf("the expression is %d bytes; the limit is %d", len(src), MaxExpressionBytes)}
	}
	if strings.TrimSpace(src) == "" {
		return nil, &Error{Line: 1, Column: 1, Message: "empty expression"}
	}
	ast, iss := env.Parse(src)
	if iss != nil && iss.Err() != nil {
		errs := iss.Errors()
		if len(errs) > 0 {
			loc := errs[0].Location
			return nil, &Error{Line: max(loc.Line(), 1), Column: max(loc.Column()+1, 1), Message: "syntax error: " + oneLine(errs[0].Message)}
		}
		return nil, &Error{Line: 1, Column: 1, Message: "syntax error: " + oneLine(iss.Err().Error())}
	}
	c := compiler{info: ast.NativeRep().SourceInfo()}
	f, err := c.filter(ast.NativeRep().Expr(), 0)
	if err != nil {
		return nil, err
	}
	if ferr := domain.ValidateFilter(f, "filter"); ferr != nil {
		return nil, &Error{Line: 1, Column: 1, Message: ferr.Message}
	}
	return f, nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

type compiler struct{ info *celast.SourceInfo }

func (c *compiler) errorf(e celast.Expr, format string, args ...any) error {
	loc := c.info.GetStartLocation(e.ID())
	return &Error{Line: max(loc.Line(), 1), Column: max(loc.Column()+1, 1), Message: fmt.Sprintf(format, args...)}
}

var comparisons = map[string]domain.FilterOp{
	operators.Equals: domain.FilterEq, operators.NotEquals: domain.FilterNe,
	operators.Less: domain.FilterLt, operators.LessEquals: domain.FilterLte,
	operators.Greater: domain.FilterGt, operators.GreaterEquals: domain.FilterGte,
}

// flipped is the operator with its operands swapped (1 < doc.a is doc.a > 1).
var flipped = map[domain.FilterOp]domain.FilterOp{
	domain.FilterEq: domain.FilterEq, domain.FilterNe: domain.FilterNe,
	domain.FilterLt: domain.FilterGt, domain.FilterLte: domain.FilterGte,
	domain.FilterGt: domain.FilterLt, domain.FilterGte: domain.FilterLte,
}

func (c *compiler) filter(e celast.Expr, depth int) (*domain.Filter, error) {
	if depth > domain.MaxFilterDepth {
		return nil, c.errorf(e, "the expression is nested more than %d levels deep", domain.MaxFilterDepth)
	}
	switch e.Kind() {
	case celast.SelectKind:
		s := e.AsSelect()
		if s.IsTestOnly() {
			var p []string
			if op := s.Operand(); op.Kind() != celast.IdentKind || op.AsIdent() != "doc" {
				var err error
				if p, err = c.path(op); err != nil {
					return nil, err
				}
			}
			return &domain.Filter{Op: domain.FilterExists, Path: append(p, s.FieldName()), Exists: true}, nil
		}
	case celast.LiteralKind:
		if b, ok := e.AsLiteral().(types.Bool); ok {
			if b {
				return &domain.Filter{Op: domain.FilterAnd}, nil
			}
			return &domain.Filter{Op: domain.FilterOr}, nil
		}
	case celast.CallKind:
		call := e.AsCall()
		args := call.Args()
		switch fn := call.FunctionName(); {
		case fn == operators.LogicalAnd || fn == operators.LogicalOr:
			op := domain.FilterAnd
			if fn == operators.LogicalOr {
				op = domain.FilterOr
			}
			out := &domain.Filter{Op: op}
			for _, a := range args {
				f, err := c.filter(a, depth+1)
				if err != nil {
					return nil, err
				}
				if f.Op == op && len(f.Children) > 0 {
					out.Children = append(out.Children, f.Children...) // a && b && c: one and
				} else {
					out.Children = append(out.Children, f)
				}
			}
			return out, nil
		case fn == operators.LogicalNot:
			f, err := c.filter(args[0], depth+1)
			if err != nil {
				return nil, err
			}
			return &domain.Filter{Op: domain.FilterNot, Children: []*domain.Filter{f}}, nil
		case comparisons[fn] != domain.FilterInvalid:
			return c.comparison(e, comparisons[fn], args[0], args[1])
		case fn == operators.In:
			p, err := c.path(args[0])
			if err != nil {
				return nil, err
			}
			if args[1].Kind() != celast.ListKind {
				return nil, c.errorf(args[1], "in needs a list of literals, for example doc.status in [\"paid\", \"sent\"]")
			}
			f := &domain.Filter{Op: domain.FilterIn, Path: p}
			for _, el := range args[1].AsList().Elements() {
				v, err := c.literal(el)
				if err != nil {
					return nil, err
				}
				f.Values = append(f.Values, v)
			}
			return f, nil
		case fn == "startsWith" && call.IsMemberFunction() && len(args) == 1:
			p, err := c.path(call.Target())
			if err != nil {
				return nil, err
			}
			v, err := c.literal(args[0])
			if err != nil {
				return nil, err
			}
			if v.Kind != domain.ValueString {
				return nil, c.errorf(args[0], "startsWith needs a string literal")
			}
			return &domain.Filter{Op: domain.FilterPrefix, Path: p, Value: v}, nil
		}
		return nil, c.errorf(e, "%s is not part of Sink's filter language (comparisons, in, startsWith, has, &&, || and ! only)", displayName(call.FunctionName()))
	}
	return nil, c.errorf(e, "expected a condition (a comparison of a doc field with a literal, in, startsWith, has, &&, || or !)")
}

func displayName(fn string) string {
	if d, ok := operators.FindReverse(fn); ok {
		return "operator " + d
	}
	return "function " + fn
}

func (c *compiler) comparison(e celast.Expr, op domain.FilterOp, l, r celast.Expr) (*domain.Filter, error) {
	if !c.isPath(l) && c.isPath(r) {
		l, r = r, l
		op = flipped[op]
	}
	p, err := c.path(l)
	if err != nil {
		return nil, err
	}
	v, err := c.literal(r)
	if err != nil {
		return nil, err
	}
	if op != domain.FilterEq && op != domain.FilterNe && v.Kind != domain.ValueNumber && v.Kind != domain.ValueString {
		return nil, c.errorf(r, "<, <=, > and >= compare with a number or a string only")
	}
	return &domain.Filter{Op: op, Path: p, Value: v}, nil
}

func (c *compiler) isPath(e celast.Expr) bool {
	_, err := c.path(e)
	return err == nil
}

// path returns the field path of doc.a.b or doc["a"]["b"].
func (c *compiler) path(e celast.Expr) ([]string, error) {
	var rev []string
	for {
		switch e.Kind() {
		case celast.IdentKind:
			if e.AsIdent() != "doc" || len(rev) == 0 {
				return nil, c.errorf(e, "expected a field of doc (doc.field)")
			}
			out := make([]string, len(rev))
			for i := range rev {
				out[i] = rev[len(rev)-1-i]
			}
			return out, nil
		case celast.SelectKind:
			s := e.AsSelect()
			if s.IsTestOnly() {
				return nil, c.errorf(e, "expected a field of doc")
			}
			rev = append(rev, s.FieldName())
			e = s.Operand()
		case celast.CallKind:
			call := e.AsCall()
			if call.FunctionName() != operators.Index {
				return nil, c.errorf(e, "expected a field of doc (doc.field or doc[\"field\"]); %s is not part of Sink's filter language", displayName(call.FunctionName()))
			}
			s, ok := call.Args()[1].AsLiteral().(types.String)
			if call.Args()[1].Kind() != celast.LiteralKind || !ok {
				return nil, c.errorf(call.Args()[1], "a field name in brackets must be a string literal (array positions are not supported)")
			}
			rev = append(rev, string(s))
			e = call.Args()[0]
		default:
			return nil, c.errorf(e, "expected a field of doc (doc.field)")
		}
	}
}

func (c *compiler) literal(e celast.Expr) (domain.Value, error) {
	neg := false
	if e.Kind() == celast.CallKind && e.AsCall().FunctionName() == operators.Negate {
		neg, e = true, e.AsCall().Args()[0]
	}
	if e.Kind() != celast.LiteralKind {
		return domain.Value{}, c.errorf(e, "expected a literal (null, true, false, a number or a string)")
	}
	switch v := e.AsLiteral().(type) {
	case types.Null:
		if !neg {
			return domain.Null(), nil
		}
	case types.Bool:
		if !neg {
			return domain.BoolValue(bool(v)), nil
		}
	case types.Int:
		if neg {
			return domain.IntValue(-int64(v)), nil
		}
		return domain.IntValue(int64(v)), nil
	case types.Uint:
		if uint64(v) > math.MaxInt64 {
			return domain.Value{}, c.errorf(e, "integer out of range")
		}
		n := int64(v)
		if neg {
			n = -n
		}
		return domain.IntValue(n), nil
	case types.Double:
		f := float64(v)
		if neg {
			f = -f
		}
		return domain.FloatValue(f), nil
	case types.String:
		if !neg {
			return domain.StringValue(string(v)), nil
		}
	}
	return domain.Value{}, c.errorf(e, "expected a literal (null, true, false, a number or a string)")
}
