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

// MarkUpdate names the mutations a write applies, so that the storage
// records them in the record's applied mark (domain.AppliedMark) in the
// same atomic write as the document and its revision.
type MarkUpdate struct {
	// IDs of the mutations the write applies, in order (one, or a fold of
	// merges); each at most domain.MaxMutationIDBytes.
	IDs []string
	// Position is the log position of the last of them; zero for a
	// synchronous write (the mark's position is then kept).
	Position domain.SourcePosition
	// Keep is the ring size: the mark keeps the Keep most recent IDs
	// (1 to domain.MaxAppliedRing).
	Keep int
	// Base, with a ConditionRevision write, is the mark the caller read
	// together with that revision. A revision pins the whole record, mark
	// included, so a storage that cannot update the mark in place may check
	// and advance Base instead of reading the mark again; if the revision no
	// longer matches, the write fails with CodeRevisionMismatch anyway.
	// Ignored with other conditions.
	Base *domain.AppliedMark
}

// WriteOp is one storage write on one record.
type WriteOp struct {
	Kind      WriteKind
	Address   domain.Address
	Document  domain.Document // WritePut only
	Condition Condition
	// Mark, when set, is recorded in the record's applied mark; see
	// Storage for how it is checked. When nil, a put keeps the record's
	// mark as it is (a synchronous write without an idempotency key never
	// wipes what the worker recorded).
	Mark *MarkUpdate
	// HandOver, on a put, hands Document.Data over to the storage: the
	// caller and whoever gave it the bytes never change them after the
	// call (they may go on reading them), so a storage may keep them as
	// they are instead of copying them. The caller hands over only bytes
	// of an allocation of their own (not part of a larger buffer that a
	// kept record would keep alive). When false, a storage that keeps the
	// document keeps a copy: the caller may change or reuse the bytes once
	// Write has returned.
	HandOver bool
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
// or ConditionRevision found no record), CodeRevisionMismatch,
// CodeAlreadyApplied (Revision is then the one the earlier write of that
// mutation produced) or CodeSuperseded (see Storage), or a storage error
// class (CodeUnavailable, CodeOutcomeUnknown, CodeInvalidArgument, ...).
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
//   - An operation the storage cannot hold (one Validate rejects) fails on
//     its own: Write reports Validate's CodeInvalidArgument error in its
//     result and writes nothing for it, Read answers an address the storage
//     cannot hold the same way, and the call's other operations go ahead.
//   - A failure of the whole call (the database cannot be reached) is
//     reported in every result, with the same error code; no result of
//     such a call reports success, a record (found or not) or a failed
//     condition. An operation the storage cannot hold may keep its
//     CodeInvalidArgument.
//   - A call whose context has already ended writes nothing and returns at
//     once. Every result carries an error matching the context's error
//     (errors.Is(err, ctx.Err())), with CodeCanceled when the context was
//     canceled. An operation the storage cannot hold may report
//     CodeInvalidArgument instead.
//   - Applied marks: Read returns the record's mark in Record.Mark (callers
//     treat its Recent slice as read-only; a storage may share it). A write
//     with a Mark is checked against the record's current mark before its
//     Condition: if the record exists and its mark holds one of Mark.IDs,
//     nothing is written and the result is CodeAlreadyApplied with the
//     revision of that ID's ring entry; else if the mark's position covers
//     Mark.Position (domain.SourcePosition.Covers), nothing is written and
//     the result is CodeSuperseded. Otherwise the write happens and the mark
//     becomes mark.Advance(Mark.IDs, new revision, Mark.Position, Mark.Keep),
//     atomically with the document and revision. A put without a Mark keeps
//     the mark; a delete removes the record with its mark.
type Storage interface {
	// Read returns one result per address, in order. The results'
	// documents are read-only: neither the caller nor whoever it passes
	// them to changes their bytes (a storage may return the bytes it
	// keeps, shared by every reader of the record). The storage does not
	// keep addrs after the call.
	Read(ctx context.Context, addrs []domain.Address) []ReadResult
	// Write applies the operations and returns one result per operation,
	// in order. The storage does not keep ops (the slice, or pointers to
	// its elements) after the call: the caller reuses it. What it keeps
	// of an operation it copies (a handed-over document's bytes it may
	// keep as they are: see WriteOp.HandOver).
	Write(ctx context.Context, ops []WriteOp) []WriteResult
	// Validate checks, without any I/O, whether the storage can hold the
	// operation (names, content type, document shape): nil, or a
	// *domain.Error with CodeInvalidArgument. It accepts every operation
	// Write can apply. The application calls it before queueing, so that
	// invalid work is never queued.
	Validate(op WriteOp) error
	// ContentTypes lists the document content types the storage can hold,
	// preferred first; empty means any.
	ContentTypes() []string
	// Ping reports whether the storage answers.
	Ping(ctx context.Context) error
}

// CheckMark checks op's mark update against the record's current mark as
// the Storage contract says: it returns the result a storage answers
// without writing (CodeAlreadyApplied with the ring entry's revision, or
// CodeSuperseded), or nil when the write goes ahead. op.Mark must be set.
func CheckMark(op *WriteOp, mark domain.AppliedMark) *WriteResult {
	for _, id := range op.Mark.IDs {
		if e, ok := mark.Find(id); ok {
			return &WriteResult{Revision: e.Revision, Existed: true,
				Err: domain.Errorf(domain.CodeAlreadyApplied, "mutation %q was already applied to record %s", id, op.Address)}
		}
	}
	if mark.Position.Covers(op.Mark.Position) {
		return &WriteResult{Existed: true,
			Err: domain.Errorf(domain.CodeSuperseded, "record %s already has a mutation applied from partition %d at offset %d, at or after this one's offset %d",
				op.Address, mark.Position.Partition, mark.Position.Offset, op.Mark.Position.Offset)}
	}
	return nil
}

// ReadBackReporter is optionally implemented by a Storage to say whether a
// read of a record right after a successful put returns exactly the
// document written (content type and bytes), as the Storage contract and
// its conformance suite require. A storage that reports false is never
// trusted to have stored what it was given: the application then reads a
// record before every read-modify-write instead of starting from the state
// it last wrote itself.
type ReadBackReporter interface {
	ReadsBackWrites() bool
}
