package application

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/sink-io/sink/domain"
)

// opRef names an operation in error messages and logs: where it is (its
// position in the client's request, or on the worker path the queued
// mutation's id) and its kind ("read", "put", "merge", "delete"). Every
// operation has one, few fail: the name is put together (at) only for an
// error.
type opRef struct {
	index      int    // the position in the request, unless queued
	mutationID string // the queued mutation's id
	queued     bool
	kind       string
}

// at returns where the operation is: "operations[3]" or "mutation <id>".
func (r opRef) at() string {
	if r.queued {
		return "mutation " + r.mutationID
	}
	return "operations[" + strconv.Itoa(r.index) + "]"
}

// readRef names read operation i of a Read request.
func readRef(i int) opRef { return opRef{index: i, kind: "read"} }

// requestRef names mutation i of a Write or Delete request.
func requestRef(i int, kind domain.MutationKind) opRef {
	return opRef{index: i, kind: kind.String()}
}

// mutationRef names a queued mutation on the worker path.
func mutationRef(m *domain.Mutation) opRef {
	return opRef{mutationID: m.ID, queued: true, kind: m.Kind.String()}
}

// Fields named by errors that no request field stands for better.
const (
	// fieldAddress: the record as a whole (storage and queue failures,
	// authorization, the record's current content).
	fieldAddress = "address"
	// fieldIntent: what the merge profile did with the intent.
	fieldIntent = "intent"
	// fieldIdempotencyKey: the client's idempotency key.
	fieldIdempotencyKey = "idempotency_key"
	// fieldReturnDocument: the request for the written document.
	fieldReturnDocument = "return_document"
)

// opDetail is the Cause of every per-operation error: the operation and
// field it is about, and the message without the prefix. It lets the prefix
// be added exactly once, and the logs name the operation and the field
// without quoting the message (which may quote client data).
type opDetail struct {
	ref    opRef
	field  string
	detail string
	cause  error
}

func (d *opDetail) Error() string { return d.detail }
func (d *opDetail) Unwrap() error { return d.cause }

// detailOf returns the operation and field of a per-operation error.
func detailOf(err error) (*opDetail, bool) {
	var d *opDetail
	ok := errors.As(err, &d)
	return d, ok
}

// opError is the one place that turns an error into a per-operation error:
// "<operation> (<kind>): <field>: <message>", keeping its code and
// retryability. An error that already names its operation is returned as is.
func opError(ref opRef, field string, err error) *domain.Error {
	e := domain.AsError(err)
	if _, ok := detailOf(e); ok {
		return e
	}
	return newOpError(ref, field, e.Code, e.Retryable, e.Error(), e)
}

// invalid returns a per-operation invalid-argument error.
func invalid(ref opRef, field, format string, args ...any) *domain.Error {
	return newOpError(ref, field, domain.CodeInvalidArgument, false, fmt.Sprintf(format, args...), nil)
}

// opErrorf returns a per-operation error with the code's default retryability.
func opErrorf(ref opRef, field string, code domain.Code, format string, args ...any) *domain.Error {
	return newOpError(ref, field, code, code.Transient(), fmt.Sprintf(format, args...), nil)
}

func newOpError(ref opRef, field string, code domain.Code, retryable bool, detail string, cause error) *domain.Error {
	return &domain.Error{
		Code:      code,
		Retryable: retryable,
		Message:   ref.at() + " (" + ref.kind + "): " + field + ": " + detail,
		Cause:     &opDetail{ref: ref, field: field, detail: detail, cause: cause},
	}
}

// reworded returns e with its detail prefixed by what (for example
// "retries exhausted after 3 attempts"), still naming its operation once.
func reworded(ref opRef, e *domain.Error, retryable bool, what string) *domain.Error {
	field, detail := fieldAddress, e.Error()
	if d, ok := detailOf(e); ok {
		ref, field, detail = d.ref, d.field, d.detail
	}
	return newOpError(ref, field, e.Code, retryable, what+": "+detail, e)
}

// storageField names the field a storage or queue result is about.
func storageField(m *domain.Mutation, code domain.Code) string {
	switch {
	case code == domain.CodeRevisionMismatch && !m.ExpectedRevision.IsZero():
		return "expected_revision"
	case code == domain.CodeNotFound && !m.ExpectedRevision.IsZero():
		return "expected_revision"
	case (code == domain.CodeAlreadyExists || code == domain.CodeNotFound) && m.Kind == domain.MutationPut && m.Mode != domain.PutUpsert:
		return "mode"
	}
	return fieldAddress
}
