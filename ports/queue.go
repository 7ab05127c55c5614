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
}

// MutationHandler applies mutations read from a queue. The application
// implements it; queue consumers (driving adapters) call it.
type MutationHandler interface {
	// ApplyMutations applies the mutations — those of one record strictly in
	// slice order, different records concurrently — retrying transient
	// failures with backoff, and returns one outcome per mutation, in order.
	ApplyMutations(ctx context.Context, mutations []domain.Mutation) []ApplyOutcome
}
