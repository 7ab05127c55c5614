// Package sinkgrpc is the gRPC driving adapter: it converts the sink.v1 API
// to application calls and back, and maps domain errors to gRPC codes in one
// place (errors.go).
package sinkgrpc

import (
	"context"
	"sync"

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
	if len(req.GetOperations()) > 1 {
		addrs := readAddresses(addressBufs.get(), req.GetOperations())
		results, err := s.svc.Read(ctx, addrs)
		addressBufs.put(addrs) // the application copied them (Service.Read keeps none)
		return s.readResponse(results, err)
	}
	var one [1]domain.Address // a single read's, on the stack
	return s.readResponse(s.svc.Read(ctx, readAddresses(one[:0], req.GetOperations())))
}

// readAddresses returns the addresses of a Read request's operations, in
// buf when it has room for them.
func readAddresses(buf []domain.Address, ops []*sinkv1.ReadOperation) []domain.Address {
	addrs := buf[:0]
	if cap(buf) < len(ops) {
		addrs = make([]domain.Address, 0, len(ops))
	}
	addrs = addrs[:len(ops)]
	for i, op := range ops {
		addrs[i] = toAddress(op.GetAddress())
	}
	return addrs
}

// readResponse builds Read's response from the application's results,
// which it then gives back (the response copies what it keeps of them).
func (s *Server) readResponse(results []application.ReadResult, err error) (*sinkv1.ReadResponse, error) {
	if err != nil {
		return nil, StatusError(err)
	}
	defer s.svc.ReleaseReadResults(results)
	found, revBytes := 0, 0
	for _, r := range results {
		if r.Status == application.StatusFound {
			found++
			revBytes += len(r.Record.Revision)
		}
	}
	out, rs, docs, revs := newReadResponse(len(results), found, revBytes)
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

// Responses take few allocations: the results, their documents and their
// revisions each take one for the whole response (a batch of 500 made
// 1,500), and the response of a single operation, with its result and a
// revision of up to inlineRevision bytes, takes one in all.

// inlineRevision is the longest revision a single operation's response
// holds in its own allocation.
const inlineRevision = 32

// singleRead is the response to a single read.
type singleRead struct {
	resp sinkv1.ReadResponse
	ptr  [1]*sinkv1.ReadResult
	res  [1]sinkv1.ReadResult
	doc  [1]sinkv1.Document
	rev  [inlineRevision]byte
}

// newReadResponse returns a response with room for n results, found
// documents and their revisions of revBytes in all: the response (its
// Results to fill in), the results, the documents and the revisions'
// buffer (empty).
func newReadResponse(n, found, revBytes int) (*sinkv1.ReadResponse, []sinkv1.ReadResult, []sinkv1.Document, []byte) {
	if n == 1 && revBytes <= inlineRevision {
		one := new(singleRead)
		one.resp.Results = one.ptr[:]
		return &one.resp, one.res[:], one.doc[:found], one.rev[:0]
	}
	return &sinkv1.ReadResponse{Results: make([]*sinkv1.ReadResult, n)}, make([]sinkv1.ReadResult, n), make([]sinkv1.Document, found), make([]byte, 0, revBytes)
}

// Write implements sinkv1.SinkServer.
func (s *Server) Write(ctx context.Context, req *sinkv1.WriteRequest) (*sinkv1.WriteResponse, error) {
	completion, err := toCompletion(req.GetCompletion())
	if err != nil {
		return nil, StatusError(err)
	}
	results, err := s.write(ctx, req.GetOperations(), completion)
	if err != nil {
		return nil, StatusError(err)
	}
	defer s.svc.ReleaseWriteResults(results) // (the response copies what it keeps of them)
	revBytes := 0
	for _, r := range results {
		revBytes += len(r.Revision)
	}
	out, rs, revs := newWriteResponse(len(results), revBytes)
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

// singleWrite is the response to a single put or merge.
type singleWrite struct {
	resp sinkv1.WriteResponse
	ptr  [1]*sinkv1.WriteResult
	res  [1]sinkv1.WriteResult
	rev  [inlineRevision]byte
}

// newWriteResponse returns a response with room for n results whose
// revisions have revBytes in all: the response (its Results to fill in),
// the results and the revisions' buffer (empty).
func newWriteResponse(n, revBytes int) (*sinkv1.WriteResponse, []sinkv1.WriteResult, []byte) {
	if n == 1 && revBytes <= inlineRevision {
		one := new(singleWrite)
		one.resp.Results = one.ptr[:]
		return &one.resp, one.res[:], one.rev[:0]
	}
	return &sinkv1.WriteResponse{Results: make([]*sinkv1.WriteResult, n)}, make([]sinkv1.WriteResult, n), make([]byte, 0, revBytes)
}

// Delete implements sinkv1.SinkServer.
func (s *Server) Delete(ctx context.Context, req *sinkv1.DeleteRequest) (*sinkv1.DeleteResponse, error) {
	completion, err := toCompletion(req.GetCompletion())
	if err != nil {
		return nil, StatusError(err)
	}
	results, err := s.delete(ctx, req.GetOperations(), completion)
	if err != nil {
		return nil, StatusError(err)
	}
	defer s.svc.ReleaseWriteResults(results) // (the response copies what it keeps of them)
	out, rs := newDeleteResponse(len(results))
	for i, r := range results {
		res := &rs[i]
		res.Index, res.Status, res.Error, res.MutationId = uint32(i), toStatus(r.Status), operationError(r.Err), r.MutationID
		out.Results[i] = res
	}
	return out, nil
}

// singleDelete is the response to a single delete.
type singleDelete struct {
	resp sinkv1.DeleteResponse
	ptr  [1]*sinkv1.DeleteResult
	res  [1]sinkv1.DeleteResult
}

// newDeleteResponse returns a response with room for n results: the
// response (its Results to fill in) and the results.
func newDeleteResponse(n int) (*sinkv1.DeleteResponse, []sinkv1.DeleteResult) {
	if n == 1 {
		one := new(singleDelete)
		one.resp.Results = one.ptr[:]
		return &one.resp, one.res[:]
	}
	return &sinkv1.DeleteResponse{Results: make([]*sinkv1.DeleteResult, n)}, make([]sinkv1.DeleteResult, n)
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

// write has the application write ops: a single operation's mutation on
// the stack, a batch's in a pooled slice. (Two paths: were the pooled slice
// and the array in one variable, the array would escape to the heap.)
func (s *Server) write(ctx context.Context, ops []*sinkv1.WriteOperation, completion application.Completion) ([]application.WriteResult, error) {
	if len(ops) > 1 {
		muts := writeMutations(mutationBufs.get(), ops)
		results, err := s.svc.Write(ctx, muts, completion)
		mutationBufs.put(muts) // the application copied them (Service.Write keeps none)
		return results, err
	}
	var one [1]domain.Mutation // a single write's, on the stack
	return s.svc.Write(ctx, writeMutations(one[:0], ops), completion)
}

// delete is write for Delete.
func (s *Server) delete(ctx context.Context, ops []*sinkv1.DeleteOperation, completion application.Completion) ([]application.WriteResult, error) {
	if len(ops) > 1 {
		muts := deleteMutations(mutationBufs.get(), ops)
		results, err := s.svc.Delete(ctx, muts, completion)
		mutationBufs.put(muts) // the application copied them (Service.Delete keeps none)
		return results, err
	}
	var one [1]domain.Mutation // a single delete's, on the stack
	return s.svc.Delete(ctx, deleteMutations(one[:0], ops), completion)
}

// deleteMutations returns the mutations of a Delete request's operations,
// in buf when it has room for them.
func deleteMutations(buf []domain.Mutation, ops []*sinkv1.DeleteOperation) []domain.Mutation {
	muts := buf[:0]
	if cap(buf) < len(ops) {
		muts = make([]domain.Mutation, 0, len(ops))
	}
	muts = muts[:len(ops)]
	for i, op := range ops {
		muts[i] = domain.Mutation{
			Kind:             domain.MutationDelete,
			Address:          toAddress(op.GetAddress()),
			ExpectedRevision: domain.Revision(op.GetExpectedRevision()),
		}
		withKey(&muts[i], op.GetIdempotencyKey())
	}
	return muts
}

// batchBufs pools a batch request's slice of T: the mutations of a batch
// Write or Delete (a 500-operation batch's took 150 KB, 7 % of what the
// server allocated per request, which the collector paid for) and the
// addresses of a batch Read (40 KB for 500). Only slices of at most
// maxPooledOps are kept, emptied, so that a pool keeps no request's
// documents, names or keys alive and no more than that per slice; the
// collector empties the pools when the server is idle.
type batchBufs[T any] struct {
	p sync.Pool // *[]T, empty
	// released, when set (tests), is called with each slice pooled, after
	// it was emptied.
	released func([]T)
}

var (
	mutationBufs batchBufs[domain.Mutation]
	addressBufs  batchBufs[domain.Address]
)

// maxPooledOps bounds the capacity of a slice kept in a batchBufs.
const maxPooledOps = 1024

// get returns an empty slice, with room from an earlier batch when the
// pool has one.
func (p *batchBufs[T]) get() []T {
	if b, ok := p.p.Get().(*[]T); ok {
		return *b
	}
	return nil
}

// put gives s (which nothing uses any more) to the pool.
func (p *batchBufs[T]) put(s []T) {
	if cap(s) > maxPooledOps {
		return
	}
	// (A variable declared here, not s: the pool takes its address, which
	// moves it to the heap where it is declared.)
	b := s[:cap(s)]
	clear(b)
	if p.released != nil {
		p.released(b)
	}
	b = b[:0]
	p.p.Put(&b)
}

// writeMutations returns the mutations of a Write request's operations,
// in buf when it has room for them.
func writeMutations(buf []domain.Mutation, ops []*sinkv1.WriteOperation) []domain.Mutation {
	muts := buf[:0]
	if cap(buf) < len(ops) {
		muts = make([]domain.Mutation, 0, len(ops))
	}
	muts = muts[:len(ops)]
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
