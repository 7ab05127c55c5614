// Package sinkgrpc is the gRPC driving adapter: it converts the sink.v1 API
// to application calls and back, and maps domain errors to gRPC codes in one
// place (errors.go).
package sinkgrpc

import (
	"context"

	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

var _ sinkv1.SinkServer = (*Server)(nil)

// Server implements sinkv1.SinkServer on top of the application service.
type Server struct {
	sinkv1.UnimplementedSinkServer
	svc *application.Service
}

// NewServer returns the gRPC API implementation.
func NewServer(svc *application.Service) *Server { return &Server{svc: svc} }

// Read implements sinkv1.SinkServer.
func (s *Server) Read(ctx context.Context, req *sinkv1.ReadRequest) (*sinkv1.ReadResponse, error) {
	addrs := make([]domain.Address, len(req.GetOperations()))
	for i, op := range req.GetOperations() {
		addrs[i] = toAddress(op.GetAddress())
	}
	results, err := s.svc.Read(ctx, addrs)
	if err != nil {
		return nil, StatusError(err)
	}
	// The results, their documents and their revisions each take one
	// allocation for the whole response (a batch of 500 made 1,500).
	out := &sinkv1.ReadResponse{Results: make([]*sinkv1.ReadResult, len(results))}
	rs := make([]sinkv1.ReadResult, len(results))
	found, revBytes := 0, 0
	for _, r := range results {
		if r.Status == application.StatusFound {
			found++
			revBytes += len(r.Record.Revision)
		}
	}
	docs := make([]sinkv1.Document, found)
	revs := make([]byte, 0, revBytes)
	for i, r := range results {
		res := &rs[i]
		res.Index, res.Status, res.Error = uint32(i), toStatus(r.Status), operationError(r.Err)
		if r.Status == application.StatusFound {
			d := &docs[0]
			docs = docs[1:]
			d.ContentType, d.Data = r.Record.Document.ContentType, r.Record.Document.Data
			res.Document = d
			res.Revision, revs = appendRevision(revs, r.Record.Revision)
		}
		out.Results[i] = res
	}
	return out, nil
}

// Write implements sinkv1.SinkServer.
func (s *Server) Write(ctx context.Context, req *sinkv1.WriteRequest) (*sinkv1.WriteResponse, error) {
	completion, err := toCompletion(req.GetCompletion())
	if err != nil {
		return nil, StatusError(err)
	}
	results, err := s.svc.Write(ctx, writeMutations(req.GetOperations()), completion)
	if err != nil {
		return nil, StatusError(err)
	}
	out := &sinkv1.WriteResponse{Results: make([]*sinkv1.WriteResult, len(results))}
	rs := make([]sinkv1.WriteResult, len(results))
	revBytes := 0
	for _, r := range results {
		revBytes += len(r.Revision)
	}
	revs := make([]byte, 0, revBytes)
	for i, r := range results {
		res := &rs[i]
		res.Index, res.Status, res.Error, res.MutationId = uint32(i), toStatus(r.Status), operationError(r.Err), r.MutationID
		res.Revision, revs = appendRevision(revs, r.Revision)
		if d := r.Document; d != nil {
			res.Document = &sinkv1.Document{ContentType: d.ContentType, Data: d.Data}
		}
		out.Results[i] = res
	}
	return out, nil
}

// Delete implements sinkv1.SinkServer.
func (s *Server) Delete(ctx context.Context, req *sinkv1.DeleteRequest) (*sinkv1.DeleteResponse, error) {
	completion, err := toCompletion(req.GetCompletion())
	if err != nil {
		return nil, StatusError(err)
	}
	muts := make([]domain.Mutation, len(req.GetOperations()))
	for i, op := range req.GetOperations() {
		muts[i] = domain.Mutation{
			Kind:             domain.MutationDelete,
			Address:          toAddress(op.GetAddress()),
			ExpectedRevision: domain.Revision(op.GetExpectedRevision()),
		}
		withKey(&muts[i], op.GetIdempotencyKey())
	}
	results, err := s.svc.Delete(ctx, muts, completion)
	if err != nil {
		return nil, StatusError(err)
	}
	out := &sinkv1.DeleteResponse{Results: make([]*sinkv1.DeleteResult, len(results))}
	rs := make([]sinkv1.DeleteResult, len(results))
	for i, r := range results {
		res := &rs[i]
		res.Index, res.Status, res.Error, res.MutationId = uint32(i), toStatus(r.Status), operationError(r.Err), r.MutationID
		out.Results[i] = res
	}
	return out, nil
}

// appendRevision appends rev to buf and returns its bytes there (nil when
// it is empty) and the grown buf. The bytes are capped, so that appending
// to one revision never overwrites the next.
func appendRevision(buf []byte, rev domain.Revision) ([]byte, []byte) {
	if rev == "" {
		return nil, buf
	}
	start := len(buf)
	buf = append(buf, rev...)
	return buf[start:len(buf):len(buf)], buf
}

// writeMutations returns the mutations of a Write request's operations.
func writeMutations(ops []*sinkv1.WriteOperation) []domain.Mutation {
	muts := make([]domain.Mutation, len(ops))
	for i, op := range ops {
		switch k := op.GetKind().(type) {
		case *sinkv1.WriteOperation_Put:
			p := k.Put
			muts[i] = domain.Mutation{
				Kind:             domain.MutationPut,
				Address:          toAddress(p.GetAddress()),
				Document:         toDocument(p.GetDocument()),
				Mode:             domain.PutMode(p.GetMode()),
				ExpectedRevision: domain.Revision(p.GetExpectedRevision()),
				ReturnDocument:   p.GetReturnDocument(),
			}
			withKey(&muts[i], p.GetIdempotencyKey())
		case *sinkv1.WriteOperation_Merge:
			m := k.Merge
			muts[i] = domain.Mutation{
				Kind:           domain.MutationMerge,
				Address:        toAddress(m.GetAddress()),
				Merge:          domain.MergeIntent{Profile: m.GetProfile(), Intent: toDocument(m.GetIntent())},
				ReturnDocument: m.GetReturnDocument(),
			}
			withKey(&muts[i], m.GetIdempotencyKey())
		}
	}
	return muts
}

// withKey makes a client's idempotency key the mutation's ID (the
// application validates it).
func withKey(m *domain.Mutation, key string) {
	if key != "" {
		m.ID, m.Keyed = key, true
	}
}

func toAddress(a *sinkv1.RecordAddress) domain.Address {
	out := domain.Address{Store: a.GetStore(), Namespace: a.GetNamespace(), Dataset: a.GetDataset()}
	switch k := a.GetKey().GetKind().(type) {
	case *sinkv1.RecordKey_String_:
		out.Key = domain.StringKey(k.String_)
	case *sinkv1.RecordKey_Int64:
		out.Key = domain.Int64Key(k.Int64)
	case *sinkv1.RecordKey_Bytes:
		out.Key = domain.BytesKey(k.Bytes)
	case *sinkv1.RecordKey_ObjectId:
		out.Key = domain.ObjectIDKey(k.ObjectId)
	}
	return out
}

func toDocument(d *sinkv1.Document) domain.Document {
	return domain.Document{ContentType: d.GetContentType(), Data: d.GetData()}
}

func toCompletion(c sinkv1.CompletionMode) (application.Completion, error) {
	switch c {
	case sinkv1.CompletionMode_COMPLETION_MODE_UNSPECIFIED, sinkv1.CompletionMode_COMPLETION_MODE_WAIT_UNTIL_APPLIED:
		return application.WaitUntilApplied, nil
	case sinkv1.CompletionMode_COMPLETION_MODE_RETURN_AFTER_ACCEPTED:
		return application.ReturnAfterAccepted, nil
	default:
		return 0, domain.Errorf(domain.CodeInvalidArgument, "completion: unknown completion mode %d", c)
	}
}

func toStatus(s application.Status) sinkv1.OperationStatus {
	switch s {
	case application.StatusApplied:
		return sinkv1.OperationStatus_OPERATION_STATUS_APPLIED
	case application.StatusAccepted:
		return sinkv1.OperationStatus_OPERATION_STATUS_ACCEPTED
	case application.StatusFound:
		return sinkv1.OperationStatus_OPERATION_STATUS_FOUND
	case application.StatusNotFound:
		return sinkv1.OperationStatus_OPERATION_STATUS_NOT_FOUND
	case application.StatusPreconditionFailed:
		return sinkv1.OperationStatus_OPERATION_STATUS_PRECONDITION_FAILED
	case application.StatusFailed:
		return sinkv1.OperationStatus_OPERATION_STATUS_FAILED
	default:
		return sinkv1.OperationStatus_OPERATION_STATUS_UNSPECIFIED
	}
}
