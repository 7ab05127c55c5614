package sinkgrpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sink-io/sink/domain"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

func TestEveryDomainCodeHasItsOwnGRPCCode(t *testing.T) {
	want := map[domain.Code]codes.Code{
		domain.CodeInternal:           codes.Internal,
		domain.CodeInvalidArgument:    codes.InvalidArgument,
		domain.CodeNotFound:           codes.NotFound,
		domain.CodeAlreadyExists:      codes.AlreadyExists,
		domain.CodeRevisionMismatch:   codes.FailedPrecondition,
		domain.CodeFailedPrecondition: codes.FailedPrecondition,
		domain.CodeUnavailable:        codes.Unavailable,
		domain.CodeOutcomeUnknown:     codes.DeadlineExceeded,
		domain.CodeResourceExhausted:  codes.ResourceExhausted,
		domain.CodePermissionDenied:   codes.PermissionDenied,
		domain.CodeUnauthenticated:    codes.Unauthenticated,
		domain.CodeCanceled:           codes.Canceled,
		domain.CodeAborted:            codes.Aborted,
		domain.CodeAlreadyApplied:     codes.AlreadyExists,
		domain.CodeSuperseded:         codes.FailedPrecondition,
		domain.CodeDeadlineExceeded:   codes.DeadlineExceeded,
	}
	for c := domain.CodeInternal; c <= domain.CodeDeadlineExceeded; c++ {
		w, ok := want[c]
		if !ok {
			t.Fatalf("domain code %s has no expected gRPC code in this test", c)
		}
		if got := grpcCode(c); got != w {
			t.Errorf("%s -> %s, want %s", c, got, w)
		}
	}
}

func TestStatusError(t *testing.T) {
	err := StatusError(fmt.Errorf("cannot write: %w", domain.Errorf(domain.CodeFailedPrecondition, "no queue")))
	if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || st.Message() != "no queue" {
		t.Fatalf("domain error: %v", err)
	}
	if st, _ := status.FromError(StatusError(errors.New("boom"))); st.Code() != codes.Internal {
		t.Fatalf("foreign error: %v", st)
	}
	if st, _ := status.FromError(StatusError(context.Canceled)); st.Code() != codes.Canceled {
		t.Fatalf("canceled: %v", st)
	}
	already := status.Error(codes.ResourceExhausted, "slow down")
	if StatusError(already) != already {
		t.Fatal("a gRPC status error must pass through unchanged")
	}
	if StatusError(nil) != nil {
		t.Fatal("nil")
	}
	e := operationError(&domain.Error{Code: domain.CodeRevisionMismatch, Message: "m", Retryable: false})
	if e.Code != uint32(codes.FailedPrecondition) || e.Reason != "REVISION_MISMATCH" || e.Message != "m" || e.Retryable {
		t.Fatalf("operation error: %+v", e)
	}
}

// Every message the adapter puts into a status or an OperationError is
// valid UTF-8, or gRPC cannot marshal the response and the client loses
// every result of its request.
func TestMessagesAreSanitisedToValidUTF8(t *testing.T) {
	raw := "revision \xff mismatch"
	want := "revision \uFFFD mismatch"
	st, _ := status.FromError(StatusError(domain.Errorf(domain.CodeRevisionMismatch, "%s", raw)))
	if st.Code() != codes.FailedPrecondition || st.Message() != want {
		t.Fatalf("domain error: %v %q", st.Code(), st.Message())
	}
	st, _ = status.FromError(StatusError(errors.New(raw)))
	if st.Code() != codes.Internal || st.Message() != want {
		t.Fatalf("foreign error: %v %q", st.Code(), st.Message())
	}
	withDetail, err := status.New(codes.ResourceExhausted, raw).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	st, _ = status.FromError(StatusError(withDetail.Err()))
	if st.Code() != codes.ResourceExhausted || st.Message() != want || len(st.Details()) != 1 {
		t.Fatalf("a status error with an invalid message must be repaired, keeping code and details: %v %q %v", st.Code(), st.Message(), st.Details())
	}
	e := operationError(&domain.Error{Code: domain.CodeRevisionMismatch, Message: raw})
	if e.Message != want || !utf8.ValidString(e.Reason) {
		t.Fatalf("operation error: %+v", e)
	}
	if _, err := proto.Marshal(&sinkv1.WriteResponse{Results: []*sinkv1.WriteResult{{Error: e}}}); err != nil {
		t.Fatalf("the response cannot be marshalled: %v", err)
	}
}

type recordingSink struct {
	sinkv1.UnimplementedSinkServer
	calls atomic.Int32
}

func (r *recordingSink) Read(_ context.Context, req *sinkv1.ReadRequest) (*sinkv1.ReadResponse, error) {
	r.calls.Add(1)
	return &sinkv1.ReadResponse{Results: make([]*sinkv1.ReadResult, len(req.GetOperations()))}, nil
}

// rawCodec sends and receives already-encoded messages, so a test can send
// what the generated client refuses to marshal (invalid UTF-8 in a string).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// A request whose string field holds invalid UTF-8 is the client's mistake:
// INVALID_ARGUMENT (grpc-go alone says INTERNAL), and no handler runs.
func TestUndecodableRequestIsInvalidArgument(t *testing.T) {
	api := &recordingSink{}
	srv := NewGRPCServer(api, health.NewServer(), RequestLimit{Bytes: 1 << 20})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	request := func(namespace string) *[]byte {
		// ReadRequest{operations: [{address: {namespace: namespace}}]}
		addr := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte(namespace))
		op := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), addr)
		b := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), op)
		return &b
	}
	var out []byte
	err = conn.Invoke(t.Context(), "/sink.v1.Sink/Read", request("n\xff"), &out, grpc.ForceCodec(rawCodec{}))
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "valid UTF-8") {
		t.Fatalf("invalid UTF-8 namespace: %v", err)
	}
	bad := []byte{0x0a, 0x05, 0x01} // a field that claims more bytes than follow
	err = conn.Invoke(t.Context(), "/sink.v1.Sink/Read", &bad, &out, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("truncated message: %v", err)
	}
	if n := api.calls.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for undecodable requests", n)
	}
	undecodable.Range(func(k, _ any) bool {
		t.Errorf("a decoding failure was left behind for %T", k)
		return true
	})
	if err := conn.Invoke(t.Context(), "/sink.v1.Sink/Read", request("n"), &out, grpc.ForceCodec(rawCodec{})); err != nil || api.calls.Load() != 1 {
		t.Fatalf("a valid request: %v (handler calls %d)", err, api.calls.Load())
	}
}

// Whole-request status errors carry Sink's reason in a google.rpc.ErrorInfo:
// DEADLINE_EXCEEDED is one gRPC code for a request refused before anything
// was done and for an outcome cut off while it ran.
func TestStatusErrorsCarrySinksReason(t *testing.T) {
	for _, c := range []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{domain.Errorf(domain.CodeDeadlineExceeded, "too late; nothing was done"), codes.DeadlineExceeded, "DEADLINE_EXCEEDED"},
		{domain.Errorf(domain.CodeOutcomeUnknown, "cut off"), codes.DeadlineExceeded, "OUTCOME_UNKNOWN"},
		{&domain.Error{Code: domain.CodeResourceExhausted, Message: "full", RetryAfter: time.Second}, codes.ResourceExhausted, "RESOURCE_EXHAUSTED"},
	} {
		st := status.Convert(StatusError(c.err))
		var reason string
		var retry bool
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.ErrorInfo:
				if d.GetDomain() == ErrorDomain {
					reason = d.GetReason()
				}
			case *errdetails.RetryInfo:
				retry = true
			}
		}
		if st.Code() != c.code || reason != c.reason {
			t.Errorf("%v: code %v reason %q, want %v %q", c.err, st.Code(), reason, c.code, c.reason)
		}
		if want := c.code == codes.ResourceExhausted; retry != want {
			t.Errorf("%v: RetryInfo %v, want %v", c.err, retry, want)
		}
	}
}
