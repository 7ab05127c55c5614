package sinkgrpc

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sink-io/sink/domain"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of the reasons Sink puts
// into whole-request status errors.
const ErrorDomain = "sink.v1"

// grpcCode is the one place that maps domain error classes to gRPC codes,
// for whole-request status errors and per-operation errors alike.
func grpcCode(c domain.Code) codes.Code {
	switch c {
	case domain.CodeInvalidArgument:
		return codes.InvalidArgument
	case domain.CodeNotFound:
		return codes.NotFound
	case domain.CodeAlreadyExists:
		return codes.AlreadyExists
	case domain.CodeRevisionMismatch, domain.CodeFailedPrecondition:
		return codes.FailedPrecondition
	case domain.CodeUnavailable:
		return codes.Unavailable
	case domain.CodeOutcomeUnknown, domain.CodeDeadlineExceeded:
		return codes.DeadlineExceeded
	case domain.CodeResourceExhausted:
		return codes.ResourceExhausted
	case domain.CodePermissionDenied:
		return codes.PermissionDenied
	case domain.CodeUnauthenticated:
		return codes.Unauthenticated
	case domain.CodeCanceled:
		return codes.Canceled
	case domain.CodeAborted:
		return codes.Aborted
	case domain.CodeAlreadyApplied:
		// Never meant to reach a client: the application answers a
		// redelivery or a retried idempotency key with the original
		// outcome. Mapped defensively to the closest class.
		return codes.AlreadyExists
	case domain.CodeSuperseded:
		// A queued mutation a later one of its record already overtook
		// (dead-lettered by the worker, the code visible in the
		// dead-letter record): it can never be applied as it is, so
		// retrying is pointless until someone decides what to do —
		// FAILED_PRECONDITION, not ABORTED (which tells the client to
		// retry the read-modify-write at a higher level).
		return codes.FailedPrecondition
	default:
		return codes.Internal
	}
}

// StatusError converts a whole-request error into a gRPC status error. The
// message is valid UTF-8 whatever the error holds (see validMessage); a gRPC
// status error passes through unchanged unless its message needs repair.
func StatusError(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && !isDomain(err) {
		if utf8.ValidString(st.Message()) {
			return err
		}
		p := st.Proto()
		p.Message = validMessage(p.Message)
		return status.FromProto(p).Err()
	}
	e := domain.AsError(err)
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, validMessage(e.Error()))
	}
	st := status.New(grpcCode(e.Code), validMessage(e.Error()))
	// google.rpc.ErrorInfo carries Sink's reason, as an OperationError's
	// reason does for one operation: one gRPC code stands for several of
	// Sink's classes (DEADLINE_EXCEEDED is both "refused before anything
	// was done" and, per operation, "outcome unknown"), and a client must
	// tell a whole-request verdict taken before anything ran from a call
	// cut off while it ran.
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: e.Code.String(), Domain: ErrorDomain}}
	if e.RetryAfter > 0 {
		// google.rpc.RetryInfo tells clients (and grpc-go's retry policy) when to come back.
		delay := (e.RetryAfter + time.Millisecond - 1).Truncate(time.Millisecond)
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	}
	if withInfo, err := st.WithDetails(details...); err == nil {
		st = withInfo
	}
	return st.Err()
}

// validMessage is the last line of defence for every message this adapter
// puts into a status or an OperationError: proto string fields must hold
// valid UTF-8, or gRPC fails the whole response ("error while marshaling").
// Messages are valid by construction (opaque bytes render in base64, see
// domain.Revision.String and domain.Key.String); any invalid sequence that
// still slips through becomes U+FFFD instead of costing the client every
// result of its request.
func validMessage(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

func isDomain(err error) bool {
	var e *domain.Error
	return errors.As(err, &e)
}

// operationError converts a per-operation error into its API form.
func operationError(e *domain.Error) *sinkv1.OperationError {
	if e == nil {
		return nil
	}
	return &sinkv1.OperationError{
		Code:      uint32(grpcCode(e.Code)),
		Reason:    e.Code.String(),
		Message:   validMessage(e.Error()),
		Retryable: e.Retryable,
	}
}
