package ports

import (
	"time"

	"github.com/sink-io/sink/domain"
)

// The observers receive measurements (metrics adapters implement them).
// Each reporter depends only on the observer of what it reports: the
// application on StorageObserver, MergeObserver, OperationObserver and
// QueueObserver, the queue consumer on LagObserver, the worker on
// DeadLetterObserver. Implementations must be safe for concurrent use and
// cheap: they are called on the request path.
//
// Every argument is a bounded class (a typed kind or status, a profile name
// registered at start-up, a topic), never a record key or document content;
// the dataset of an OperationOutcome is the one client-chosen value.

// StorageObserver receives measurements of the batch calls to storage.
type StorageObserver interface {
	// StorageCall: one batch call to storage with n operations, which took d.
	StorageCall(call StorageCall, n int, d time.Duration)
	// Combined: one storage batch carried the work of callers waiting
	// together (natural batching): requests, or batches of queued
	// mutations applied by the worker; 1 when a caller went alone.
	Combined(call StorageCall, callers int)
}

// MergeObserver receives measurements of merges.
type MergeObserver interface {
	// MergeConflict: a merge met a concurrent change and is retried.
	// profile is a name registered at start-up.
	MergeConflict(profile string)
	// MergeFingerprintMismatch: a worker met a queued merge whose profile
	// of the same name has another fingerprint (definition) than the one
	// the merge was submitted under (see FingerprintedProfile). applied
	// says whether the merge was applied with the current definition
	// (policy apply) or dead-lettered (policy dead-letter).
	MergeFingerprintMismatch(profile string, applied bool)
}

// OperationObserver receives the outcomes of operations.
type OperationObserver interface {
	// Operations: the final outcomes of the operations of one request, or
	// of one batch of queued mutations applied by the worker. The slice
	// is the caller's: an observer does not keep it after the call (the
	// application reuses it for later requests).
	Operations(outcomes []OperationOutcome)
	// Deduplicated: n mutations were not applied because their record's
	// applied mark covered them (see domain.AppliedMark): coverage is
	// domain.Duplicate (already applied: a redelivery, a dead-letter
	// replay, or a client's retry with the same idempotency key; reported
	// applied) or domain.Superseded (a queued mutation whose position its
	// record's mark had passed: some worker handled it before; neither
	// applied nor dead-lettered).
	Deduplicated(source OperationSource, coverage domain.Coverage, n int)
}

// QueueObserver receives measurements of the mutations that go through
// the durable queue: their submission, and the retries of the worker's
// attempts to apply them.
type QueueObserver interface {
	// QueuePublish: one batch of n mutations submitted to the queue, which
	// took d (until every acknowledgement).
	QueuePublish(n int, d time.Duration)
	// ApplyRetry: a queued mutation is retried after a transient failure,
	// after sleeping backoff.
	ApplyRetry(backoff time.Duration)
}

// LagObserver receives the consumer lag of the mutation log.
type LagObserver interface {
	// WorkerLag: the consumer lag of one partition of the mutation log (the
	// number of records after the consumer's position), reported by the
	// worker after each poll. A negative lag means the worker no longer
	// owns the partition (revoked or lost) and the measurement is
	// withdrawn.
	WorkerLag(topic string, partition int32, lag int64)
}

// DeadLetterObserver receives the number of dead-lettered mutations.
type DeadLetterObserver interface {
	// DeadLettered: n queued mutations were written to the dead-letter
	// topic for reason.
	DeadLettered(reason DeadLetterReason, n int)
}

// StorageCall is the kind of a batch call to storage.
type StorageCall uint8

// Storage calls.
const (
	StorageRead StorageCall = iota + 1
	StorageWrite
)

// String returns "read" or "write" (the metrics label).
func (c StorageCall) String() string {
	switch c {
	case StorageRead:
		return "read"
	case StorageWrite:
		return "write"
	default:
		return "unknown"
	}
}

// OperationSource says where an operation came from.
type OperationSource uint8

// Operation sources.
const (
	// SourceRequest: an operation of a client request (Read, Write, Delete).
	SourceRequest OperationSource = iota
	// SourceWorker: a queued mutation applied by the worker.
	SourceWorker
)

// String returns "request" or "worker" (the metrics label).
func (s OperationSource) String() string {
	if s == SourceWorker {
		return "worker"
	}
	return "request"
}

// OperationKind is the kind of an operation.
type OperationKind uint8

// Operation kinds. OperationUnknown is the kind of a queued mutation with
// a kind Sink does not know.
const (
	OperationUnknown OperationKind = iota
	OperationRead
	OperationPut
	OperationMerge
	OperationDelete
)

// OperationKindOf returns the operation kind of a mutation kind.
func OperationKindOf(k domain.MutationKind) OperationKind {
	switch k {
	case domain.MutationPut:
		return OperationPut
	case domain.MutationMerge:
		return OperationMerge
	case domain.MutationDelete:
		return OperationDelete
	default:
		return OperationUnknown
	}
}

// String returns "read", "put", "merge", "delete" or "unknown" (the
// metrics label).
func (k OperationKind) String() string {
	switch k {
	case OperationRead:
		return "read"
	case OperationPut:
		return "put"
	case OperationMerge:
		return "merge"
	case OperationDelete:
		return "delete"
	default:
		return "unknown"
	}
}

// OperationCompletion is the completion mode of a request's write or
// delete.
type OperationCompletion uint8

// Completion modes. CompletionNone is that of reads and of queued mutations
// applied by the worker.
const (
	CompletionNone OperationCompletion = iota
	CompletionWaitUntilApplied
	CompletionReturnAfterAccepted
)

// String returns "wait_until_applied", "return_after_accepted", or "" for
// CompletionNone (the metrics label).
func (c OperationCompletion) String() string {
	switch c {
	case CompletionWaitUntilApplied:
		return "wait_until_applied"
	case CompletionReturnAfterAccepted:
		return "return_after_accepted"
	default:
		return ""
	}
}

// OperationStatus is the final status of an operation.
type OperationStatus uint8

// Operation statuses.
const (
	StatusUnspecified OperationStatus = iota
	StatusApplied
	StatusAccepted
	StatusFound
	StatusNotFound
	StatusPreconditionFailed
	StatusFailed
	// StatusSkipped: a queued mutation found already applied (a
	// redelivery), nothing written — so that StatusApplied counts only new
	// applications. (A request's operation that a retry with the same
	// idempotency key found applied has the status its client got:
	// StatusApplied; Deduplicated counts it.)
	StatusSkipped
)

// String returns "applied", "accepted", "found", "not_found",
// "precondition_failed", "failed", "skipped" or "unspecified" (the metrics
// label).
func (s OperationStatus) String() string {
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
	case StatusSkipped:
		return "skipped"
	default:
		return "unspecified"
	}
}

// OperationOutcome is the final outcome of one operation. Its fields are
// bounded classes, plus the dataset, whose names clients choose (metrics
// adapters must cap the number of distinct datasets they keep). It is
// comparable, so that equal outcomes can be added up.
type OperationOutcome struct {
	Source OperationSource
	// Dataset is the addressed store/namespace/dataset of an operation that
	// passed validation and authorization: its store is the served one and
	// its names are valid. It is the zero DatasetRef for operations rejected
	// before (invalid, denied, or for another store), whose names must not
	// take any of the capped label slots.
	Dataset domain.DatasetRef
	Kind    OperationKind
	// Completion is that of writes and deletes of requests; CompletionNone
	// for reads and worker mutations.
	Completion OperationCompletion
	// Status: for worker mutations also StatusSkipped.
	Status OperationStatus
	// HasError says whether the operation ended with an error; Code is
	// then the error's code (and is meaningless otherwise).
	HasError bool
	Code     domain.Code
}

// CodeLabel returns the name of the outcome's error code, or "" without an
// error (the metrics label).
func (o OperationOutcome) CodeLabel() string {
	if !o.HasError {
		return ""
	}
	return o.Code.String()
}

// DeadLetterReason is why a queued mutation was dead-lettered: the code of
// its final error, or that the record was not a Sink mutation at all.
type DeadLetterReason struct {
	// Undecodable: the record is not a Sink mutation (Code is unset).
	Undecodable bool
	// Code is the domain.Code of the mutation's final error.
	Code domain.Code
}

// String returns the domain.Code name (e.g. "INVALID_ARGUMENT"), or
// "UNDECODABLE" (the metrics label).
func (r DeadLetterReason) String() string {
	if r.Undecodable {
		return "UNDECODABLE"
	}
	return r.Code.String()
}

// NopObserver discards every measurement; it implements every observer.
type NopObserver struct{}

var (
	_ StorageObserver    = NopObserver{}
	_ MergeObserver      = NopObserver{}
	_ OperationObserver  = NopObserver{}
	_ QueueObserver      = NopObserver{}
	_ LagObserver        = NopObserver{}
	_ DeadLetterObserver = NopObserver{}
)

func (NopObserver) StorageCall(StorageCall, int, time.Duration)        {}
func (NopObserver) Combined(StorageCall, int)                          {}
func (NopObserver) MergeConflict(string)                               {}
func (NopObserver) MergeFingerprintMismatch(string, bool)              {}
func (NopObserver) Operations([]OperationOutcome)                      {}
func (NopObserver) Deduplicated(OperationSource, domain.Coverage, int) {}
func (NopObserver) QueuePublish(int, time.Duration)                    {}
func (NopObserver) ApplyRetry(time.Duration)                           {}
func (NopObserver) WorkerLag(string, int32, int64)                     {}
func (NopObserver) DeadLettered(DeadLetterReason, int)                 {}
