package application

import (
	"github.com/sink-io/sink/domain"
)

// Status is the outcome class of one operation.
type Status uint8

// Statuses.
const (
	StatusUnspecified Status = iota
	// StatusApplied: storage applied the write or delete.
	StatusApplied
	// StatusAccepted: the durable queue accepted the write or delete.
	StatusAccepted
	// StatusFound: the read found the record.
	StatusFound
	// StatusNotFound: the record does not exist (an error only for REPLACE).
	StatusNotFound
	// StatusPreconditionFailed: CREATE found a record, or the revision differed.
	StatusPreconditionFailed
	// StatusFailed: see the error.
	StatusFailed
)

func (s Status) String() string {
	switch s {
	case StatusApplied:
		return "applied"
	case StatusAccepted:
		return "accepted"
	case StatusFound:
		return "found"
	case StatusNotFound:
		return "not_found"
	case StatusPreconditionFailed:
		return "precondition_failed"
	case StatusFailed:
		return "failed"
	default:
		return "unspecified"
	}
}

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
	Err     *domain.Error
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
