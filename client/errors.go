package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// Errors of operations, for errors.Is. Every error an operation returns
// (whole-request and per-operation alike) is an *OperationError that
// matches one of these by its reason.
var (
	// ErrNotFound: the record does not exist (a read or a REPLACE).
	ErrNotFound = errors.New("sink: not found")
	// ErrAlreadyExists: a CREATE found an existing record.
	ErrAlreadyExists = errors.New("sink: already exists")
	// ErrRevisionMismatch: the record's revision differs from the expected one.
	ErrRevisionMismatch = errors.New("sink: revision mismatch")
	// ErrFailedPrecondition: the server is not in a state that allows the
	// operation (for example RETURN_AFTER_ACCEPTED without a queue).
	ErrFailedPrecondition = errors.New("sink: failed precondition")
	// ErrOutcomeUnknown: a write may or may not have been applied (a
	// timeout or a broken connection after it was sent). The client never
	// resends such a write unless it carries an idempotency key.
	ErrOutcomeUnknown = errors.New("sink: outcome unknown")
	// ErrInvalidArgument: the input is wrong; retrying it cannot help.
	ErrInvalidArgument = errors.New("sink: invalid argument")
	// ErrUnavailable: a transient failure; nothing was applied.
	ErrUnavailable = errors.New("sink: unavailable")
	// ErrAborted: a merge kept conflicting until its attempts ran out;
	// nothing was applied.
	ErrAborted = errors.New("sink: aborted")
	// ErrPermissionDenied: the caller may not do this.
	ErrPermissionDenied = errors.New("sink: permission denied")
	// ErrUnauthenticated: the caller is not authenticated.
	ErrUnauthenticated = errors.New("sink: unauthenticated")
	// ErrResourceExhausted: a limit, quota or rate was hit; nothing was
	// applied.
	ErrResourceExhausted = errors.New("sink: resource exhausted")
	// ErrInternal: a server bug or an unexpected storage answer.
	ErrInternal = errors.New("sink: internal error")
	// ErrDeadlineExceeded: the server refused the operation because the
	// call's deadline had passed, or was too short to be met, before the
	// operation was attempted; nothing was applied.
	ErrDeadlineExceeded = errors.New("sink: deadline exceeded before the operation was attempted")
)

// reasons maps Sink's reasons (OperationError.reason) to the sentinels.
var reasons = map[string]error{
	"NOT_FOUND":           ErrNotFound,
	"ALREADY_EXISTS":      ErrAlreadyExists,
	"ALREADY_APPLIED":     ErrAlreadyExists,
	"REVISION_MISMATCH":   ErrRevisionMismatch,
	"FAILED_PRECONDITION": ErrFailedPrecondition,
	"SUPERSEDED":          ErrFailedPrecondition,
	"OUTCOME_UNKNOWN":     ErrOutcomeUnknown,
	"INVALID_ARGUMENT":    ErrInvalidArgument,
	"UNAVAILABLE":         ErrUnavailable,
	"ABORTED":             ErrAborted,
	"PERMISSION_DENIED":   ErrPermissionDenied,
	"UNAUTHENTICATED":     ErrUnauthenticated,
	"RESOURCE_EXHAUSTED":  ErrResourceExhausted,
	"INTERNAL":            ErrInternal,
	"DEADLINE_EXCEEDED":   ErrDeadlineExceeded,
}

// notAppliedReasons are the per-operation reasons whose semantics say the
// operation did not take effect (the server's transient classes:
// domain.Code.Transient): resending it cannot double it.
func notAppliedReason(reason string) bool {
	return reason == "UNAVAILABLE" || reason == "RESOURCE_EXHAUSTED" || reason == "ABORTED" || reason == "DEADLINE_EXCEEDED"
}

// OperationError is why one operation failed: the server's gRPC code,
// reason and message, or the client's own verdict (an unknown outcome, a
// codec failure). Match it with errors.Is against the Err… values.
type OperationError struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Reason is Sink's finer class, e.g. "REVISION_MISMATCH".
	Reason string
	// Message says what is wrong.
	Message string
	// Attempts is how many times the client sent the operation.
	Attempts int

	retryable bool
	cause     error
}

// Error implements error.
func (e *OperationError) Error() string {
	return fmt.Sprintf("sink: %s: %s", e.Reason, e.Message)
}

// Retryable reports whether sending the same operation again can succeed
// (the server's verdict; for ErrOutcomeUnknown, whether the operation is
// safe to resend is a separate question: only with an idempotency key).
func (e *OperationError) Retryable() bool { return e.retryable }

// Is matches the sentinel of the error's reason.
func (e *OperationError) Is(target error) bool {
	s, ok := reasons[e.Reason]
	return ok && s == target
}

// Unwrap returns the underlying cause (a context error, a codec error), if any.
func (e *OperationError) Unwrap() error { return e.cause }

// opError converts a per-operation error of the API.
func opError(pe *sinkv1.OperationError) *OperationError {
	reason := pe.GetReason()
	if reason == "" {
		reason = codeReason(codes.Code(pe.GetCode()))
	}
	return &OperationError{Code: codes.Code(pe.GetCode()), Reason: reason, Message: pe.GetMessage(), retryable: pe.GetRetryable()}
}

// codeReason names a gRPC code as Sink's reasons do.
func codeReason(c codes.Code) string {
	switch c {
	case codes.FailedPrecondition:
		return "FAILED_PRECONDITION"
	case codes.DeadlineExceeded:
		return "OUTCOME_UNKNOWN"
	case codes.Unknown:
		return "INTERNAL"
	case codes.OK:
		return "OK"
	}
	name := c.String()
	if strings.HasPrefix(name, "Code(") {
		return "INTERNAL"
	}
	// codes.String gives "NotFound": turn it into NOT_FOUND.
	var b strings.Builder
	for i, r := range name {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// statusError converts a whole-request error into an *OperationError.
func statusError(err error) *OperationError {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		c := codes.Canceled
		if errors.Is(err, context.DeadlineExceeded) {
			c = codes.DeadlineExceeded
		}
		return &OperationError{Code: c, Reason: codeReason(c), Message: err.Error(), cause: err}
	}
	st := status.Convert(err)
	c := st.Code()
	return &OperationError{Code: c, Reason: statusReason(st), Message: st.Message(), retryable: c == codes.Unavailable || c == codes.ResourceExhausted || c == codes.Aborted, cause: err}
}

// serverErrorDomain is the google.rpc.ErrorInfo domain of Sink's reasons in
// whole-request status errors (the server's sinkgrpc.ErrorDomain).
const serverErrorDomain = "sink.v1"

// statusReason is the reason of a whole-request status: the one the server
// put into its google.rpc.ErrorInfo when it knows it (DEADLINE_EXCEEDED
// there is "refused before anything was done", not an unknown outcome),
// else the gRPC code's.
func statusReason(st *status.Status) string {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == serverErrorDomain {
			if _, known := reasons[ei.GetReason()]; known {
				return ei.GetReason()
			}
		}
	}
	return codeReason(st.Code())
}

func notFound(what string) *OperationError {
	return &OperationError{Code: codes.NotFound, Reason: "NOT_FOUND", Message: what + " does not exist"}
}
