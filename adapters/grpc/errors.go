package sinkgrpc

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/domain"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

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
	case domain.CodeOutcomeUnknown:
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
	default:
		return codes.Internal
	}
}

// StatusError converts a whole-request error into a gRPC status error.
func StatusError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isDomain(err) {
		return err
	}
	e := domain.AsError(err)
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, e.Error())
	}
	return status.Error(grpcCode(e.Code), e.Error())
}

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
		Message:   e.Error(),
		Retryable: e.Retryable,
	}
}
