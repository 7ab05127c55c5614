package sinkgrpc

import (
	"context"
	"fmt"

	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/celfilter"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// Scan implements sinkv1.SinkServer: it streams pages until the scan is
// complete, the request's limit is reached or the client goes away. Every
// page is a Scan use case call (authorization and admission each time).
func (s *Server) Scan(req *sinkv1.ScanRequest, stream sinkv1.Sink_ScanServer) error {
	if cause, ok := undecodable.LoadAndDelete(req); ok {
		return decodeFailure(cause.(error))
	}
	ctx := stream.Context()
	spec, err := toSpec(req.GetDataset(), req.GetRange(), req.GetFilter(), req.GetWhere())
	if err != nil {
		return StatusError(err)
	}
	spec.Descending = req.GetDescending()
	spec.Projection = domain.Projection{Fields: req.GetProjection().GetFields(), Exclude: req.GetProjection().GetExclude()}
	areq := &application.ScanRequest{Spec: spec, PageSize: int(req.GetPageSize()), Cursor: req.GetCursor()}
	var sendErr error
	err = s.svc.ScanPages(ctx, areq, int(req.GetLimit()), func(page *application.ScanPage) error {
		out := &sinkv1.ScanPage{Cursor: page.Cursor, Scanned: uint64(page.Scanned), Returned: uint64(page.Returned),
			Records: make([]*sinkv1.ScanRecord, len(page.Records))}
		for i, r := range page.Records {
			rec := &sinkv1.ScanRecord{Key: fromKey(r.Key), Revision: []byte(r.Revision)}
			if !req.GetKeysOnly() {
				rec.Document = &sinkv1.Document{ContentType: r.Document.ContentType, Data: r.Document.Data}
			}
			out.Records[i] = rec
		}
		sendErr = stream.Send(out)
		return sendErr
	})
	if sendErr != nil {
		return sendErr // the stream's own error, as gRPC reported it
	}
	return StatusError(err)
}

// Count implements sinkv1.SinkServer.
func (s *Server) Count(ctx context.Context, req *sinkv1.CountRequest) (*sinkv1.CountResponse, error) {
	spec, err := toSpec(req.GetDataset(), req.GetRange(), req.GetFilter(), req.GetWhere())
	if err != nil {
		return nil, StatusError(err)
	}
	r, err := s.svc.Count(ctx, &application.CountRequest{Spec: spec, Estimate: req.GetEstimate()})
	if err != nil {
		return nil, StatusError(err)
	}
	return &sinkv1.CountResponse{Count: uint64(max(r.Count, 0)), Exact: r.Exact}, nil
}

func toSpec(d *sinkv1.DatasetRef, r *sinkv1.KeyRange, f *sinkv1.Filter, where string) (domain.ScanSpec, error) {
	spec := domain.ScanSpec{Dataset: domain.DatasetRef{Store: d.GetStore(), Namespace: d.GetNamespace(), Dataset: d.GetDataset()}}
	if b := r.GetStart(); b != nil {
		spec.Range.Start = &domain.KeyBound{Key: toKey(b.GetKey()), Inclusive: !b.GetExclusive()}
	}
	if b := r.GetEnd(); b != nil {
		spec.Range.End = &domain.KeyBound{Key: toKey(b.GetKey()), Inclusive: !b.GetExclusive()}
	}
	if r != nil && r.Prefix != nil {
		p := r.GetPrefix()
		spec.Range.Prefix = &p
	}
	switch {
	case f != nil && where != "":
		return spec, domain.Errorf(domain.CodeInvalidArgument, "set filter or where, not both")
	case where != "":
		tree, err := celfilter.Compile(where)
		if err != nil {
			return spec, domain.Errorf(domain.CodeInvalidArgument, "where: %v", err)
		}
		spec.Filter = tree
	case f != nil:
		tree, err := toFilter(f, "filter", 0)
		if err != nil {
			return spec, err
		}
		spec.Filter = tree
	}
	return spec, nil
}

func toKey(k *sinkv1.RecordKey) domain.Key {
	return toAddress(&sinkv1.RecordAddress{Key: k}).Key
}

func fromKey(k domain.Key) *sinkv1.RecordKey {
	switch k.Kind {
	case domain.KeyString:
		return &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: k.StringValue()}}
	case domain.KeyInt64:
		return &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_Int64{Int64: k.Int64()}}
	case domain.KeyBytes:
		return &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_Bytes{Bytes: k.Bytes()}}
	case domain.KeyObjectID:
		return &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_ObjectId{ObjectId: k.Bytes()}}
	}
	return nil
}

// toFilter converts the proto tree; errors name the node (its path in
// the tree). Depth is bounded here already (the proto may nest deeper
// than the language allows).
func toFilter(f *sinkv1.Filter, at string, depth int) (*domain.Filter, error) {
	bad := func(format string, args ...any) error {
		return domain.Errorf(domain.CodeInvalidArgument, "invalid filter at %s: %s", at, fmt.Sprintf(format, args...))
	}
	if depth > domain.MaxFilterDepth {
		return nil, bad("and/or/not are nested more than %d levels deep", domain.MaxFilterDepth)
	}
	list := func(op domain.FilterOp, fs []*sinkv1.Filter) (*domain.Filter, error) {
		if len(fs) > domain.MaxFilterNodes {
			return nil, bad("more than %d operands", domain.MaxFilterNodes)
		}
		out := &domain.Filter{Op: op}
		for i, c := range fs {
			cf, err := toFilter(c, fmt.Sprintf("%s.%s[%d]", at, op, i), depth+1)
			if err != nil {
				return nil, err
			}
			out.Children = append(out.Children, cf)
		}
		return out, nil
	}
	cmp := func(op domain.FilterOp, c *sinkv1.FieldComparison) (*domain.Filter, error) {
		v, err := toScalar(c.GetValue(), at+"."+op.String()+".value")
		return &domain.Filter{Op: op, Path: c.GetPath(), Value: v}, err
	}
	switch n := f.GetNode().(type) {
	case *sinkv1.Filter_And:
		return list(domain.FilterAnd, n.And.GetFilters())
	case *sinkv1.Filter_Or:
		return list(domain.FilterOr, n.Or.GetFilters())
	case *sinkv1.Filter_Not:
		c, err := toFilter(n.Not, at+".not", depth+1)
		if err != nil {
			return nil, err
		}
		return &domain.Filter{Op: domain.FilterNot, Children: []*domain.Filter{c}}, nil
	case *sinkv1.Filter_Eq:
		return cmp(domain.FilterEq, n.Eq)
	case *sinkv1.Filter_Ne:
		return cmp(domain.FilterNe, n.Ne)
	case *sinkv1.Filter_Lt:
		return cmp(domain.FilterLt, n.Lt)
	case *sinkv1.Filter_Lte:
		return cmp(domain.FilterLte, n.Lte)
	case *sinkv1.Filter_Gt:
		return cmp(domain.FilterGt, n.Gt)
	case *sinkv1.Filter_Gte:
		return cmp(domain.FilterGte, n.Gte)
	case *sinkv1.Filter_Prefix:
		return cmp(domain.FilterPrefix, n.Prefix)
	case *sinkv1.Filter_In:
		if len(n.In.GetValues()) > domain.MaxFilterNodes {
			return nil, bad("in has more than %d values", domain.MaxFilterNodes)
		}
		out := &domain.Filter{Op: domain.FilterIn, Path: n.In.GetPath()}
		for i, v := range n.In.GetValues() {
			sv, err := toScalar(v, fmt.Sprintf("%s.in.values[%d]", at, i))
			if err != nil {
				return nil, err
			}
			out.Values = append(out.Values, sv)
		}
		return out, nil
	case *sinkv1.Filter_Exists:
		return &domain.Filter{Op: domain.FilterExists, Path: n.Exists.GetPath(), Exists: n.Exists.GetExists()}, nil
	}
	return nil, bad("empty node: set one operator")
}

func toScalar(v *sinkv1.ScalarValue, at string) (domain.Value, error) {
	switch k := v.GetKind().(type) {
	case *sinkv1.ScalarValue_NullValue:
		return domain.Null(), nil
	case *sinkv1.ScalarValue_BoolValue:
		return domain.BoolValue(k.BoolValue), nil
	case *sinkv1.ScalarValue_IntValue:
		return domain.IntValue(k.IntValue), nil
	case *sinkv1.ScalarValue_DoubleValue:
		return domain.FloatValue(k.DoubleValue), nil
	case *sinkv1.ScalarValue_StringValue:
		return domain.StringValue(k.StringValue), nil
	}
	return domain.Value{}, domain.Errorf(domain.CodeInvalidArgument, "invalid filter at %s: set a value", at)
}
