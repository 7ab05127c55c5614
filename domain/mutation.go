package domain

import "time"

// PutMode says what a put expects of the record's existence.
type PutMode uint8

// Put modes. Values are part of the queued mutation encoding.
const (
	PutUpsert  PutMode = 0 // create or replace
	PutCreate  PutMode = 1 // the record must not exist
	PutReplace PutMode = 2 // the record must exist
)

func (m PutMode) String() string {
	switch m {
	case PutUpsert:
		return "UPSERT"
	case PutCreate:
		return "CREATE"
	case PutReplace:
		return "REPLACE"
	default:
		return "UNKNOWN"
	}
}

// MutationKind is the kind of a write-side operation.
type MutationKind uint8

// Mutation kinds. Values are part of the queued mutation encoding.
const (
	MutationPut    MutationKind = 1
	MutationMerge  MutationKind = 2
	MutationDelete MutationKind = 3
)

func (k MutationKind) String() string {
	switch k {
	case MutationPut:
		return "put"
	case MutationMerge:
		return "merge"
	case MutationDelete:
		return "delete"
	default:
		return "unknown"
	}
}

// MergeIntent names a merge profile and carries the intent document the
// profile interprets. The asynchronous path stores the intent, never the
// merge result: the profile runs when the mutation is applied.
type MergeIntent struct {
	Profile string
	Intent  Document
	// Fingerprint identifies the profile's definition when the merge was
	// submitted to the queue (profiles loaded from a file have one; empty
	// otherwise), so that the worker can tell whether its profile of the
	// same name is the same definition.
	Fingerprint string
}

// SourcePosition locates a queued mutation in its log: the log's identity
// (for Kafka: the topic's id, or a configured log epoch), partition and
// offset. It is zero (Log empty) for mutations applied synchronously.
type SourcePosition struct {
	Log       string
	Partition int32
	Offset    int64
}

// IsZero reports whether the position names no log.
func (p SourcePosition) IsZero() bool { return p.Log == "" }

// Covers reports whether a mutation at q comes at or before p in the same
// partition of the same log: once p has been applied to a record, a
// mutation of that record at q is a redelivery (or was superseded).
// Positions in different logs or partitions never cover each other.
func (p SourcePosition) Covers(q SourcePosition) bool {
	return !p.IsZero() && p.Log == q.Log && p.Partition == q.Partition && q.Offset <= p.Offset
}

// Mutation is one write-side operation on one record: a complete-document
// put, a profile-driven merge, or a delete. The same type flows through the
// synchronous path and through the mutation queue, so both share one
// execution path.
type Mutation struct {
	// ID is unique per submitted mutation and stable across redeliveries;
	// a client's idempotency key, when it gave one (at most
	// MaxMutationIDBytes). Records remember the IDs of the mutations last
	// applied to them (AppliedMark), so an ID seen again is not applied again.
	ID string
	// Keyed is true when ID is a client's idempotency key.
	Keyed   bool
	Kind    MutationKind
	Address Address

	// Put: the complete document and the existence mode.
	Document Document
	Mode     PutMode

	// Merge: profile name and intent.
	Merge MergeIntent

	// ExpectedRevision, when not empty, must equal the record's current
	// revision (put and delete only).
	ExpectedRevision Revision

	// ReturnDocument asks for the document as written in the result (put
	// and merge, synchronous completion only; never queued).
	ReturnDocument bool

	// SubmittedAt is when the mutation was accepted (async) or received (sync).
	SubmittedAt time.Time
	// Source is where the mutation was read from when it came from a queue.
	Source SourcePosition
}
