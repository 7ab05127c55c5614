package domain

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Code classifies an error so that every layer can act on it the same way:
// the application decides whether to retry, the worker whether to
// dead-letter, the gRPC adapter which status to send.
type Code uint8

// Error codes.
const (
	// CodeInternal: a bug or an unexpected storage answer. Not retried.
	CodeInternal Code = iota
	// CodeInvalidArgument: the input is wrong; retrying the same input cannot help.
	CodeInvalidArgument
	// CodeNotFound: the record (or another named thing) does not exist.
	CodeNotFound
	// CodeAlreadyExists: a CREATE found an existing record.
	CodeAlreadyExists
	// CodeRevisionMismatch: the record's revision differs from the expected one.
	CodeRevisionMismatch
	// CodeFailedPrecondition: the system is not in a state that allows the
	// operation (for example, no durable queue is configured).
	CodeFailedPrecondition
	// CodeUnavailable: a transient failure (network, failover, overload).
	// Retrying with backoff can help.
	CodeUnavailable
	// CodeOutcomeUnknown: the operation may or may not have taken effect (a
	// timeout after sending). Retrying is safe only for idempotent operations.
	CodeOutcomeUnknown
	// CodeResourceExhausted: a limit or quota was hit; retry later.
	CodeResourceExhausted
	// CodePermissionDenied: the caller may not do this.
	CodePermissionDenied
	// CodeUnauthenticated: the caller is not authenticated.
	CodeUnauthenticated
	// CodeCanceled: the caller gave up.
	CodeCanceled
	// CodeAborted: a read-modify-write kept conflicting until its attempts ran out.
	CodeAborted
	// CodeAlreadyApplied: the record's applied mark holds the mutation's ID
	// (a redelivery, or a client's retry with the same idempotency key);
	// nothing was written.
	CodeAlreadyApplied
	// CodeSuperseded: the record's applied mark is at or past the mutation's
	// log position but does not hold its ID; nothing was written, and
	// applying it could reorder the record's mutations.
	CodeSuperseded
	// CodeDeadlineExceeded: the caller's deadline passed, or was too short
	// to be met, before the operation was attempted: nothing was done (a
	// deadline that ends while a write is at storage is CodeOutcomeUnknown
	// instead). Sending it again with a longer deadline is safe.
	CodeDeadlineExceeded
)

var codeNames = [...]string{
	CodeInternal:           "INTERNAL",
	CodeInvalidArgument:    "INVALID_ARGUMENT",
	CodeNotFound:           "NOT_FOUND",
	CodeAlreadyExists:      "ALREADY_EXISTS",
	CodeRevisionMismatch:   "REVISION_MISMATCH",
	CodeFailedPrecondition: "FAILED_PRECONDITION",
	CodeUnavailable:        "UNAVAILABLE",
	CodeOutcomeUnknown:     "OUTCOME_UNKNOWN",
	CodeResourceExhausted:  "RESOURCE_EXHAUSTED",
	CodePermissionDenied:   "PERMISSION_DENIED",
	CodeUnauthenticated:    "UNAUTHENTICATED",
	CodeCanceled:           "CANCELED",
	CodeAborted:            "ABORTED",
	CodeAlreadyApplied:     "ALREADY_APPLIED",
	CodeSuperseded:         "SUPERSEDED",
	CodeDeadlineExceeded:   "DEADLINE_EXCEEDED",
}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("CODE(%d)", c)
}

// Transient reports whether an error of this code is worth retrying with
// backoff regardless of the operation (the operation certainly did not
// take effect, or taking effect twice is harmless).
func (c Code) Transient() bool {
	return c == CodeUnavailable || c == CodeResourceExhausted || c == CodeAborted || c == CodeDeadlineExceeded
}

// Error is Sink's error type: a code, a message meant for the client, and
// whether retrying the same request can help.
type Error struct {
	Code      Code
	Message   string
	Retryable bool
	// RetryAfter, when positive, is how long the caller should wait before
	// retrying (for example, until a rate limit admits the request).
	RetryAfter time.Duration
	Cause      error
}

func (e *Error) Error() string {
	if e.Cause != nil && e.Message == "" {
		return e.Code.String() + ": " + e.Cause.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Cause }

// Errorf returns an *Error with the code's default retryability.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: code.Transient()}
}

// Wrap returns an *Error carrying cause, with the given message prefix.
func Wrap(code Code, cause error, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if cause != nil {
		msg += ": " + cause.Error()
	}
	return &Error{Code: code, Message: msg, Retryable: code.Transient(), Cause: cause}
}

// AsError converts any error into an *Error: a wrapped *Error is returned
// as is; context cancellation and deadlines get their own codes; anything
// else is internal.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	switch {
	case errors.Is(err, context.Canceled):
		return &Error{Code: CodeCanceled, Message: err.Error(), Cause: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: CodeOutcomeUnknown, Message: err.Error(), Cause: err}
	}
	return &Error{Code: CodeInternal, Message: err.Error(), Cause: err}
}

// CodeOf returns the code of err (CodeInternal for foreign errors).
func CodeOf(err error) Code {
	if err == nil {
		return CodeInternal
	}
	return AsError(err).Code
}

// IsRetryable reports whether retrying the failed operation can help.
func IsRetryable(err error) bool {
	e := AsError(err)
	return e != nil && e.Retryable
}
