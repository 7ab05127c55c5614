package ports

import (
	"context"

	"github.com/sink-io/sink/domain"
)

// MutationQueue is a durable log of mutations to be applied later.
type MutationQueue interface {
	// Submit durably enqueues the mutations and returns one error per
	// mutation, in order: nil once the queue has accepted it durably (it will
	// be applied at least once), otherwise a *domain.Error (usually
	// CodeUnavailable). Mutations of the same record must be applied in
	// submission order.
	Submit(ctx context.Context, mutations []domain.Mutation) []error
}

// ApplyOutcome is the final outcome of applying one queued mutation.
type ApplyOutcome struct {
	// Err is nil when the mutation was applied (or had nothing to do, like a
	// delete of an absent record). Otherwise it is a *domain.Error: a
	// permanent failure (invalid input, unknown profile, failed
	// precondition, retries exhausted) that the consumer dead-letters, or
	// CodeCanceled when the handler stopped because ctx ended: such a
	// mutation must be neither committed nor dead-lettered. When ctx has a
	// deadline (the consumer's time budget of one batch), a mutation still
	// failing transiently (or waiting behind one of its record) when it
	// passes is "parked": a Retryable error, neither committed nor
	// dead-lettered, delivered again later.
	Err error
	// Attempts is how many times the handler tried the mutation.
	Attempts int
	// Skipped is true (with a nil Err) when the mutation had been applied
	// before (a redelivery: its ID is in the record's applied mark) and
	// nothing was written; count it apart from new applications.
	Skipped bool
	// Superseded is true (with Skipped) when the record's applied mark had
	// already passed the mutation's log position without holding its ID:
	// under the log's per-partition order some worker handled it before
	// (applied it, or dead-lettered it for a failure of its own). It is
	// neither applied nor dead-lettered.
	Superseded bool
	// Overtaken is true (with a failure in Err) when this call wrote a
	// later mutation of the same record, from the same log partition, over
	// an applied mark that had not reached the failed mutation's position:
	// the record's mark now passes it, so the partition's next reader would
	// skip it as superseded and only this consumer can dead-letter it (even
	// after it lost the partition). The handler decides it atomically with
	// that write (the write is conditional on the record it read, mark
	// included); a failed mutation whose record's mark had already passed
	// it when the later mutation was written was handled by another
	// consumer and is reported Superseded instead. When the outcome of
	// that write is unknown and cannot be told later, Overtaken is true
	// too: the mutation is dead-lettered rather than risk losing it,
	// although another consumer may have handled it.
	Overtaken bool
}

// MutationHandler applies mutations read from a queue. The application
// implements it; queue consumers (driving adapters) call it.
type MutationHandler interface {
	// ApplyMutations applies the mutations — those of one record strictly in
	// slice order, different records concurrently — retrying transient
	// failures with backoff, and returns one outcome per mutation, in order.
	ApplyMutations(ctx context.Context, mutations []domain.Mutation) []ApplyOutcome
}

// Resolution is what a record's applied mark says of a queued mutation
// whose apply failed in a way that may have hidden a write (an unknown
// outcome, retries exhausted on a transient failure).
type Resolution uint8

// Resolutions.
const (
	// ResolutionUnknown: the record could not be read; nothing is known.
	ResolutionUnknown Resolution = iota
	// ResolutionNotApplied: the record does not hold the mutation's ID and
	// its mark has not passed the mutation's log position: it was not
	// applied.
	ResolutionNotApplied
	// ResolutionApplied: the record's ring holds the mutation's ID (or, for
	// a delete, the record is gone: a delete removes the mark with the
	// record, and its effect holds): it was applied.
	ResolutionApplied
	// ResolutionSuperseded: the record's mark passed the mutation's log
	// position without holding its ID: a later mutation of the record was
	// applied after it (see ApplyOutcome.Superseded).
	ResolutionSuperseded
)

func (r Resolution) String() string {
	switch r {
	case ResolutionNotApplied:
		return "not applied"
	case ResolutionApplied:
		return "applied"
	case ResolutionSuperseded:
		return "superseded"
	default:
		return "unknown"
	}
}

// MutationResolver is implemented by a MutationHandler (the application)
// that can tell whether failed queued mutations were applied after all. A
// consumer asks it before it dead-letters a mutation whose failure may
// have hidden a write, so that a dead letter is only ever a mutation that
// was not applied.
type MutationResolver interface {
	// ResolveMutations reads the records of the mutations (one storage
	// call) and returns one resolution per mutation, in order.
	ResolveMutations(ctx context.Context, mutations []domain.Mutation) []Resolution
}

// FenceCheck reports, with a non-nil error, that the queue consumer that
// handed mutations to MutationHandler.ApplyMutations may have lost them to
// another consumer (a rebalance moved their partitions while it was slow
// or frozen). A consumer puts one into ApplyMutations' context
// (WithFenceCheck); the handler calls it right before a write that would
// overtake a failed mutation (ApplyOutcome.Overtaken): after such a write
// the partition's next reader skips the failed mutation, so a consumer
// that lost the partition must not make it. When the check fails, the
// write is not made: its mutations end CodeCanceled (delivered again to
// whoever owns the partition) and the failure is not overtaken. It may be
// called concurrently and should be cheap enough for that rare path (one
// round trip to a coordinator).
type FenceCheck func(context.Context) error

type fenceCheckKey struct{}

// WithFenceCheck returns ctx carrying f (see FenceCheck).
func WithFenceCheck(ctx context.Context, f FenceCheck) context.Context {
	return context.WithValue(ctx, fenceCheckKey{}, f)
}

// FenceCheckOf returns the FenceCheck ctx carries, or nil.
func FenceCheckOf(ctx context.Context) FenceCheck {
	f, _ := ctx.Value(fenceCheckKey{}).(FenceCheck)
	return f
}
