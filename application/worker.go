package application

import (
	"context"
	"fmt"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

var _ ports.MutationHandler = (*Service)(nil)

// ApplyMutations applies queued mutations through the same execution path
// as synchronous writes. Mutations of one record run strictly in slice
// order; transient failures are retried with jittered exponential backoff
// (Config.Apply) without letting that record's later mutations overtake
// them. The outcome of each mutation is final: nil, a permanent failure for
// the dead-letter topic, or CodeCanceled when ctx ended first.
func (s *Service) ApplyMutations(ctx context.Context, muts []domain.Mutation) []ports.ApplyOutcome {
	outcomes := make([]ports.ApplyOutcome, len(muts))
	results := make([]WriteResult, len(muts))
	work := make([]domain.Mutation, len(muts))
	copy(work, muts)
	valid := make([]bool, len(muts))
	defer s.observeApplied(work, valid, outcomes, results)
	refs := func(i int) opRef { return mutationRef(&work[i]) }
	stopped := func(i int) *domain.Error {
		return opError(refs(i), fieldAddress, domain.Wrap(domain.CodeCanceled, ctx.Err(), "stopped before the mutation was applied"))
	}
	pending := make([]int, 0, len(muts))
	for i := range work {
		if err := s.validateMutation(refs(i), &work[i]); err != nil {
			outcomes[i] = ports.ApplyOutcome{Err: err, Attempts: 1}
			continue
		}
		if err := s.checkFingerprint(refs(i), &work[i]); err != nil {
			outcomes[i] = ports.ApplyOutcome{Err: err, Attempts: 1}
			continue
		}
		valid[i] = true
		pending = append(pending, i)
	}
	for attempt := 1; len(pending) > 0; attempt++ {
		s.execute(ctx, work, pending, results, refs, true)
		retry := pending[:0:0]
		for _, i := range pending {
			outcomes[i].Attempts = attempt
			r := results[i]
			switch {
			case r.Err == nil:
				outcomes[i].Err = nil
			case r.Err.Code == domain.CodeCanceled || ctx.Err() != nil:
				outcomes[i].Err = stopped(i)
			case r.Err.Retryable:
				retry = append(retry, i)
			default:
				outcomes[i].Err = r.Err
			}
		}
		if len(retry) == 0 {
			break
		}
		if attempt >= s.cfg.Apply.MaxAttempts {
			for _, i := range retry {
				outcomes[i].Err = reworded(refs(i), results[i].Err, false, fmt.Sprintf("retries exhausted after %d attempts", attempt))
			}
			break
		}
		d := s.cfg.Apply.backoff(attempt)
		s.obs.ApplyRetry(d)
		if !sleep(ctx, d) {
			for _, i := range retry {
				outcomes[i].Err = stopped(i)
			}
			break
		}
		pending = retry
	}
	return outcomes
}
