package ports

import (
	"context"

	"github.com/sink-io/sink/domain"
)

// ConditionKind is the precondition a storage write must meet.
type ConditionKind uint8

// Conditions.
const (
	// ConditionNone: write unconditionally (upsert; delete if present).
	ConditionNone ConditionKind = iota
	// ConditionAbsent: the record must not exist (create).
	ConditionAbsent
	// ConditionExists: the record must exist (replace).
	ConditionExists
	// ConditionRevision: the record must exist with exactly Condition.Revision.
	ConditionRevision
)

// Condition is a write precondition.
type Condition struct {
	Kind     ConditionKind
	Revision domain.Revision
}

// WriteKind says what a storage write does.
type WriteKind uint8

// Write kinds.
const (
	WritePut WriteKind = iota
	WriteDelete
)

// WriteOp is one storage write on one record.
type WriteOp struct {
	Kind      WriteKind
	Address   domain.Address
	Document  domain.Document // WritePut only
	Condition Condition
}

// ReadResult is the outcome of reading one record. Found is false when the
// record does not exist; Err is set when the read itself failed.
type ReadResult struct {
	Record domain.Record
	Found  bool
	Err    error
}

// WriteResult is the outcome of one write. On success Revision is the
// record's new revision (empty after a delete) and Existed tells whether the
// record existed before. On failure Err is a *domain.Error whose code is
// CodeAlreadyExists (ConditionAbsent failed), CodeNotFound (ConditionExists
// or ConditionRevision found no record), CodeRevisionMismatch, or a storage
// error class (CodeUnavailable, CodeOutcomeUnknown, CodeInvalidArgument, ...).
type WriteResult struct {
	Revision domain.Revision
	Existed  bool
	Err      error
}

// Storage is a record store. It is batch-native: one call carries many
// operations and returns one result per operation, in order.
//
// Contract:
//   - Every operation is atomic on its record; nothing is atomic across records.
//   - Operations on the same record within one Write call take effect in
//     slice order; different records may be applied concurrently.
//   - Revisions are opaque, change on every successful write and are never
//     reused for the same record, even after a delete and re-create.
//   - A whole-call failure is reported as the same error in every result.
type Storage interface {
	// Read returns one result per address, in order.
	Read(ctx context.Context, addrs []domain.Address) []ReadResult
	// Write applies the operations and returns one result per operation, in order.
	Write(ctx context.Context, ops []WriteOp) []WriteResult
	// Validate checks, without any I/O, whether the storage can hold the
	// operation (names, content type, document shape). The application calls
	// it before queueing, so that invalid work is never queued.
	Validate(op WriteOp) error
	// ContentTypes lists the document content types the storage can hold,
	// preferred first; empty means any.
	ContentTypes() []string
	// Ping reports whether the storage answers.
	Ping(ctx context.Context) error
}
