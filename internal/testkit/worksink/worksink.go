// Package worksink is the owed-work floor of Sink's benchmarks: the Sink
// service served as the null server serves it (nullsink.ServeService: the
// same grpc-go server, codec and stream workers), doing per operation only
// the work Sink's contract owes whoever implements it, straight-line,
// with Sink's own parts where the work is theirs:
//
//   - every address is checked (names not empty, at most 120 bytes, valid
//     UTF-8 without control characters; a string key not empty, at most
//     1,024 bytes, valid UTF-8), as bad input gets a specific error;
//   - a put's document is checked (its content type parsed, its size
//     bounded, its data well-formed: domain.CheckDocument) and stored with
//     a new revision, atomic on its record (the memory adapter, Sink's
//     reference store);
//   - a merge's intent is checked as a document; the record is read, the
//     merge-patch profile (adapters/mergepatch) applied, its result
//     checked and written on the condition that the revision read is
//     still the record's (again on a conflict); no time budget, which
//     Sink gives every merge (the merge-patch profile's work is bounded
//     by its inputs' sizes, a profile of rules' is not);
//   - a read returns the stored document and revision, a delete removes
//     the record;
//   - every operation is counted (one counter: what operations owe their
//     metrics).
//
// It does none of what Sink does beyond that: no admission bounds, request
// IDs, authorization, natural batching, merge folding, applied marks,
// idempotency keys, per-dataset metrics, traces or asynchronous
// completion, and it answers only what the benchmarks send: upserts,
// merge-patch merges, reads and deletes of string keys, completion
// WAIT_UNTIL_APPLIED, in any store's name; the rest, and bad input, it
// refuses with one InvalidArgument status for the whole request. So Sink's processor time over this floor's is what
// Sink's design costs beyond the work itself, and this floor's over the
// null server's about the least an implementation of the contract pays
// (this is a simple one, not a proven minimum: a cleverer one may pay
// less).
package worksink

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/adapters/mergepatch"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/nullsink"
	"github.com/sink-io/sink/ports"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// Bounds, Sink's defaults (application.DefaultConfig).
const (
	maxName     = 120
	maxKey      = 1024
	maxDocument = 4 << 20
	maxDepth    = 100
)

// Server is the owed-work floor.
type Server struct {
	sinkv1.UnimplementedSinkServer
	store *memory.Store
	merge mergepatch.Profile
	// Ops counts the operations served.
	Ops atomic.Uint64
}

// New returns the floor with an empty store.
func New() *Server {
	return &Server{store: memory.New(), merge: mergepatch.New(mergepatch.WithMaxDepth(maxDepth))}
}

// Serve serves a new floor on lis until the returned server stops.
func Serve(lis net.Listener) *grpc.Server { return nullsink.ServeService(lis, New()) }

// invalid is the error of a request the floor refuses whole: it answers
// only well-formed requests of the shapes the benchmarks send.
func invalid(what string) error { return status.Error(codes.InvalidArgument, what) }

func checkName(v string) bool {
	return v != "" && len(v) <= maxName && utf8.ValidString(v) && !strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// address checks a and returns it as the domain's.
func address(a *sinkv1.RecordAddress) (domain.Address, error) {
	k, ok := a.GetKey().GetKind().(*sinkv1.RecordKey_String_)
	if !ok || k.String_ == "" || len(k.String_) > maxKey || !utf8.ValidString(k.String_) {
		return domain.Address{}, invalid("a string key of 1 to 1024 bytes of UTF-8 is required")
	}
	if !checkName(a.GetNamespace()) || !checkName(a.GetDataset()) || a.GetStore() != "" && !checkName(a.GetStore()) {
		return domain.Address{}, invalid("bad name")
	}
	return domain.Address{Store: a.GetStore(), Namespace: a.GetNamespace(), Dataset: a.GetDataset(), Key: domain.StringKey(k.String_)}, nil
}

// document checks d and returns it as the domain's.
func document(d *sinkv1.Document) (domain.Document, error) {
	out := domain.Document{ContentType: d.GetContentType(), Data: d.GetData()}
	if out.ContentType == "" || len(out.ContentType) > domain.MaxContentTypeLength || len(out.Data) > maxDocument {
		return out, invalid("bad document")
	}
	if _, err := domain.MediaType(out.ContentType); err != nil {
		return out, invalid(err.Error())
	}
	if err := domain.CheckDocument(out, maxDepth); err != nil {
		return out, invalid(err.Error())
	}
	return out, nil
}

func storageError(err error) error { return status.Error(codes.Unavailable, err.Error()) }

// Read reads every record in one storage call.
func (s *Server) Read(ctx context.Context, r *sinkv1.ReadRequest) (*sinkv1.ReadResponse, error) {
	addrs := make([]domain.Address, len(r.Operations))
	for i, op := range r.Operations {
		a, err := address(op.GetAddress())
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	got := s.store.Read(ctx, addrs)
	n, size := len(got), 0
	for _, g := range got {
		size += len(g.Record.Revision)
	}
	// The response in three allocations and the revisions' bytes in one,
	// as Sink builds its own.
	out := &sinkv1.ReadResponse{Results: make([]*sinkv1.ReadResult, n)}
	res, docs, revs := make([]sinkv1.ReadResult, n), make([]sinkv1.Document, n), make([]byte, 0, size)
	for i, g := range got {
		out.Results[i], res[i].Index = &res[i], uint32(i)
		switch {
		case g.Err != nil:
			return nil, storageError(g.Err)
		case g.Found:
			docs[i] = sinkv1.Document{ContentType: g.Record.Document.ContentType, Data: g.Record.Document.Data}
			res[i].Status, res[i].Document = sinkv1.OperationStatus_OPERATION_STATUS_FOUND, &docs[i]
			res[i].Revision, revs = appendRevision(revs, g.Record.Revision)
		default:
			res[i].Status = sinkv1.OperationStatus_OPERATION_STATUS_NOT_FOUND
		}
	}
	s.Ops.Add(uint64(n))
	return out, nil
}

// appendRevision appends rev to buf and returns its bytes there (capped,
// so that the next append does not write into them) and the grown buf.
func appendRevision(buf []byte, rev domain.Revision) ([]byte, []byte) {
	start := len(buf)
	buf = append(buf, rev...)
	return buf[start:len(buf):len(buf)], buf
}

// Write applies a request's puts in one storage call, or its merges one by
// one (the benchmarks send puts or merges, never both in one request).
func (s *Server) Write(ctx context.Context, r *sinkv1.WriteRequest) (*sinkv1.WriteResponse, error) {
	if c := r.GetCompletion(); c != sinkv1.CompletionMode_COMPLETION_MODE_UNSPECIFIED && c != sinkv1.CompletionMode_COMPLETION_MODE_WAIT_UNTIL_APPLIED {
		return nil, invalid("only WAIT_UNTIL_APPLIED")
	}
	puts := make([]ports.WriteOp, 0, len(r.Operations))
	for _, op := range r.Operations {
		if m := op.GetMerge(); m != nil {
			if m.GetProfile() != mergepatch.Name || m.GetIdempotencyKey() != "" {
				return nil, invalid("only merge-patch merges without idempotency keys")
			}
			continue
		}
		p := op.GetPut()
		if p == nil || p.GetMode() != sinkv1.PutMode_PUT_MODE_UPSERT || len(p.GetExpectedRevision()) > 0 || p.GetIdempotencyKey() != "" {
			return nil, invalid("only upserts without conditions or idempotency keys")
		}
		a, err := address(p.GetAddress())
		if err != nil {
			return nil, err
		}
		d, err := document(p.GetDocument())
		if err != nil {
			return nil, err
		}
		puts = append(puts, ports.WriteOp{Kind: ports.WritePut, Address: a, Document: d, HandOver: true})
	}
	if len(puts) > 0 && len(puts) < len(r.Operations) {
		return nil, invalid("puts and merges in one request") // (their order on a record would not be kept)
	}
	written := s.store.Write(ctx, puts)
	n := len(r.Operations)
	out := &sinkv1.WriteResponse{Results: make([]*sinkv1.WriteResult, n)}
	res, revs := make([]sinkv1.WriteResult, n), make([]byte, 0, 20*n)
	for i, op := range r.Operations { // the puts' results in order, or the merges applied
		var rev domain.Revision
		if m := op.GetMerge(); m != nil {
			var err error
			if rev, err = s.mergeOne(ctx, m); err != nil {
				return nil, err
			}
		} else {
			w := written[0]
			if written = written[1:]; w.Err != nil {
				return nil, storageError(w.Err)
			}
			rev = w.Revision
		}
		res[i] = sinkv1.WriteResult{Index: uint32(i), Status: sinkv1.OperationStatus_OPERATION_STATUS_APPLIED}
		res[i].Revision, revs = appendRevision(revs, rev)
		out.Results[i] = &res[i]
	}
	s.Ops.Add(uint64(n))
	return out, nil
}

// mergeOne reads the record, merges the intent into it and writes the
// result on the condition that the record is as read, again until no
// other write came between.
func (s *Server) mergeOne(ctx context.Context, m *sinkv1.MergeOperation) (domain.Revision, error) {
	a, err := address(m.GetAddress())
	if err != nil {
		return "", err
	}
	intent, err := document(m.GetIntent())
	if err != nil {
		return "", err
	}
	for {
		got := s.store.Read(ctx, []domain.Address{a})[0]
		if got.Err != nil {
			return "", storageError(got.Err)
		}
		in := ports.MergeInput{Address: a, Intent: intent}
		cond := ports.Condition{Kind: ports.ConditionAbsent}
		if got.Found {
			in.Current = &got.Record.Document
			cond = ports.Condition{Kind: ports.ConditionRevision, Revision: got.Record.Revision}
		}
		doc, err := s.merge.Merge(ctx, in) // (its work is bounded by its inputs' sizes)
		if err != nil {
			return "", invalid(err.Error())
		}
		if len(doc.Data) > maxDocument {
			return "", invalid("merge result too large")
		}
		if err := domain.CheckDocument(doc, maxDepth); err != nil {
			return "", invalid(err.Error())
		}
		w := s.store.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: doc, Condition: cond, HandOver: true}})[0]
		switch c := domain.CodeOf(w.Err); {
		case w.Err == nil:
			return w.Revision, nil
		case c == domain.CodeRevisionMismatch || c == domain.CodeAlreadyExists || c == domain.CodeNotFound:
			continue // another write came between: again
		case errors.Is(w.Err, ctx.Err()):
			return "", status.FromContextError(w.Err).Err()
		default:
			return "", storageError(w.Err)
		}
	}
}

// Delete deletes every record in one storage call.
func (s *Server) Delete(ctx context.Context, r *sinkv1.DeleteRequest) (*sinkv1.DeleteResponse, error) {
	if c := r.GetCompletion(); c != sinkv1.CompletionMode_COMPLETION_MODE_UNSPECIFIED && c != sinkv1.CompletionMode_COMPLETION_MODE_WAIT_UNTIL_APPLIED {
		return nil, invalid("only WAIT_UNTIL_APPLIED")
	}
	ops := make([]ports.WriteOp, len(r.Operations))
	for i, op := range r.Operations {
		if len(op.GetExpectedRevision()) > 0 || op.GetIdempotencyKey() != "" {
			return nil, invalid("only deletes without conditions or idempotency keys")
		}
		a, err := address(op.GetAddress())
		if err != nil {
			return nil, err
		}
		ops[i] = ports.WriteOp{Kind: ports.WriteDelete, Address: a}
	}
	out := &sinkv1.DeleteResponse{Results: make([]*sinkv1.DeleteResult, len(ops))}
	res := make([]sinkv1.DeleteResult, len(ops))
	for i, w := range s.store.Write(ctx, ops) {
		if w.Err != nil {
			return nil, storageError(w.Err)
		}
		res[i] = sinkv1.DeleteResult{Index: uint32(i), Status: sinkv1.OperationStatus_OPERATION_STATUS_APPLIED}
		out.Results[i] = &res[i]
	}
	s.Ops.Add(uint64(len(ops)))
	return out, nil
}
