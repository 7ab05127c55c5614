package sinkgrpc

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/domain"
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
	}
	for c := domain.CodeInternal; c <= domain.CodeAborted; c++ {
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
