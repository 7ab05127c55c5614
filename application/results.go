package application

import (
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Status is the outcome class of one operation: ports.OperationStatus,
// so that results and the observers' outcomes are one type (a result never
// has StatusSkipped, which only the worker reports).
type Status = ports.OperationStatus

// Statuses.
const (
	StatusUnspecified = ports.StatusUnspecified
	// StatusApplied: storage applied the write or delete.
	StatusApplied = ports.StatusApplied
	// StatusAccepted: the durable queue accepted the write or delete.
	StatusAccepted = ports.StatusAccepted
	// StatusFound: the read found the record.
	StatusFound = ports.StatusFound
	// StatusNotFound: the record does not exist (an error only for REPLACE).
	StatusNotFound = ports.StatusNotFound
	// StatusPreconditionFailed: CREATE found a record, or the revision differed.
	StatusPreconditionFailed = ports.StatusPreconditionFailed
	// StatusFailed: see the error.
	StatusFailed = ports.StatusFailed
)

// ReadResult is the result of one read operation.
type ReadResult struct {
	Status Status
	Record domain.Record
	Err    *domain.Error
}

// WriteResult is the result of one write or delete operation.
type WriteResult struct {
	Status Status
	// Revision is the record's new revision (StatusApplied puts and merges).
	Revision domain.Revision
	// MutationID identifies the queued mutation (StatusAccepted).
	MutationID string
	// Skipped is true for a StatusApplied mutation that had been applied
	// before (its ID, a queued mutation's or a client's idempotency key,
	// is in the record's applied mark): nothing was written this time, and
	// Revision is the one the earlier write produced.
	Skipped bool
	// Superseded is true (with Skipped) for a queued mutation whose log
	// position its record's applied mark had already passed, without its
	// ID in the ring: under the log's per-partition order some worker
	// handled it before (applied it, or dead-lettered it for a failure of
	// its own). It is not applied now, and it is not dead-lettered: it has
	// no revision to report.
	Superseded bool
	// Document is the document as written (the merged one for a merge),
	// for an applied put or merge that asked for it (ReturnDocument) and
	// was written now (not Skipped).
	Document *domain.Document
	Err      *domain.Error
}

// failed returns the result for an operation that ended with err.
func failed(err error) WriteResult {
	e := domain.AsError(err)
	return WriteResult{Status: statusOf(e), Err: e}
}

func statusOf(e *domain.Error) Status {
	switch e.Code {
	case domain.CodeNotFound:
		return StatusNotFound
	case domain.CodeAlreadyExists, domain.CodeRevisionMismatch:
		return StatusPreconditionFailed
	default:
		return StatusFailed
	}
}

// Completion says when a Write or Delete returns.
type Completion uint8

// Completion modes.
const (
	// WaitUntilApplied returns after storage finished the work.
	WaitUntilApplied Completion = iota
	// ReturnAfterAccepted returns after the durable queue accepted the work.
	ReturnAfterAccepted
)
