package ports

import (
	"time"

	"github.com/sink-io/sink/domain"
)

// Observer receives measurements from the application and from the queue
// consumer (metrics adapters implement it). Implementations must be safe for
// concurrent use and cheap: they are called on the request path.
//
// Every string argument is a bounded class (a call name, a profile name
// registered at start-up, a reason class, a topic), never a record key or
// document content.
type Observer interface {
	// StorageCall: one batch call to storage ("read" or "write") with n operations.
	StorageCall(call string, n int, d time.Duration)
	// Combined: one storage batch ("read" or "write") carried the work of
	// callers waiting together (natural batching): requests, or batches
	// of queued mutations applied by the worker; 1 when a caller went
	// alone.
	Combined(call string, callers int)
	// QueuePublish: one batch of n mutations submitted to the queue.
	QueuePublish(n int, d time.Duration)
	// MergeConflict: a merge met a concurrent change and is retried.
	MergeConflict(profile string)
	// ApplyRetry: a queued mutation is retried after a transient failure,
	// after sleeping backoff.
	ApplyRetry(backoff time.Duration)
	// Operations: the final outcomes of the operations of one request, or of
	// one batch of queued mutations applied by the worker.
	Operations(outcomes []OperationOutcome)
	// WorkerLag: the consumer lag of one partition of the mutation log (the
	// number of records after the consumer's position), reported by the
	// worker after each poll. A negative lag means the worker no longer owns
	// the partition (revoked or lost) and the measurement is withdrawn.
	WorkerLag(topic string, partition int32, lag int64)
	// DeadLettered: n queued mutations were written to the dead-letter
	// topic. reason is a bounded class: the domain.Code name of the final
	// error (e.g. "INVALID_ARGUMENT"), or "UNDECODABLE" for records that are
	// not Sink mutations.
	DeadLettered(reason string, n int)
	// Deduplicated: n mutations were not applied because their record's
	// applied mark covered them (see domain.AppliedMark): coverage is
	// domain.Duplicate (already applied: a redelivery, a dead-letter
	// replay, or a client's retry with the same idempotency key; reported
	// applied) or domain.Superseded (a queued mutation a later one of its
	// record overtook; dead-lettered).
	Deduplicated(source OperationSource, coverage domain.Coverage, n int)
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

// OperationOutcome is the final outcome of one operation. Its fields are
// bounded classes, plus the dataset, whose names clients choose (metrics
// adapters must cap the number of distinct datasets they keep).
type OperationOutcome struct {
	Source OperationSource
	// Dataset is the addressed store/namespace/dataset of an operation that
	// passed validation and authorization: its store is the served one and
	// its names are valid. It is the zero DatasetRef for operations rejected
	// before (invalid, denied, or for another store), whose names must not
	// take any of the capped label slots.
	Dataset domain.DatasetRef
	// Kind is "read", "put", "merge" or "delete".
	Kind string
	// Completion is "wait_until_applied" or "return_after_accepted" for
	// writes and deletes of requests, "" for reads and worker mutations.
	Completion string
	// Status is "applied", "accepted", "found", "not_found",
	// "precondition_failed" or "failed"; for worker mutations also
	// "skipped": found already applied (a redelivery), nothing written —
	// so that "applied" counts only new applications. (A request's
	// operation that a retry with the same idempotency key found applied
	// has the status its client got: "applied"; Deduplicated counts it.)
	Status string
	// Code is the domain.Code name of the operation's error, "" without one.
	Code string
}

// NopObserver discards every measurement.
type NopObserver struct{}

func (NopObserver) StorageCall(string, int, time.Duration)             {}
func (NopObserver) Combined(string, int)                               {}
func (NopObserver) QueuePublish(int, time.Duration)                    {}
func (NopObserver) MergeConflict(string)                               {}
func (NopObserver) ApplyRetry(time.Duration)                           {}
func (NopObserver) Operations([]OperationOutcome)                      {}
func (NopObserver) WorkerLag(string, int32, int64)                     {}
func (NopObserver) DeadLettered(string, int)                           {}
func (NopObserver) Deduplicated(OperationSource, domain.Coverage, int) {}
