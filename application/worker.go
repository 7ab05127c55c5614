package application

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/ctxtime"
	"github.com/sink-io/sink/ports"
)

var _ ports.MutationHandler = (*Service)(nil)

// ApplyMutations applies queued mutations through the same execution path
// as synchronous writes. Mutations of one record run strictly in slice
// order; transient failures are retried with jittered exponential backoff
// (Config.Apply) without letting that record's later mutations overtake
// them. The outcome of each mutation is nil, a permanent failure for the
// dead-letter topic, CodeCanceled when ctx was canceled first, or — when
// ctx has a deadline (the worker's time budget of one batch) — a retryable
// error for the mutations still failing (or blocked behind a failing
// mutation of their record) when the next attempt would not start before
// the deadline: they are "parked", neither applied nor dead-lettered, and
// the caller delivers them again later. Such a parked outcome keeps the
// code of the last failure, is Retryable and reports the attempts made.
// The mutations' documents are handed over as with Write.
func (s *Service) ApplyMutations(ctx context.Context, muts []domain.Mutation) []ports.ApplyOutcome {
	outcomes := make([]ports.ApplyOutcome, len(muts))
	results := make([]WriteResult, len(muts))
	work := make([]domain.Mutation, len(muts))
	copy(work, muts)
	valid := make([]bool, len(muts))
	defer s.observeApplied(work, valid, outcomes, results)
	refs := func(i int) opRef { return mutationRef(&work[i]) }
	deadline, budgeted := ctx.Deadline()
	// slack: no attempt starts unless its backoff ends this long before the
	// deadline, so that timer and scheduling latency after the last sleep
	// do not carry the call past its budget (a twentieth of the budget, at
	// most 50ms).
	slack := min(time.Until(deadline)/20, 50*time.Millisecond)
	// overBudget: ctx ended by its deadline (the batch's time budget), not
	// by cancellation (shutdown, a lost partition).
	overBudget := func() bool { return budgeted && errors.Is(ctx.Err(), context.DeadlineExceeded) }
	stopped := func(i int) *domain.Error {
		return opError(refs(i), fieldAddress, domain.Wrap(domain.CodeCanceled, ctx.Err(), "stopped before the mutation was applied"))
	}
	parked := func(i int, attempts int) *domain.Error {
		e := results[i].Err
		if e == nil || e.Code == domain.CodeCanceled || !e.Retryable {
			e = domain.Errorf(domain.CodeUnavailable, "the worker's time budget ended during the attempt")
		}
		return reworded(refs(i), e, true, fmt.Sprintf("not applied within the worker's time budget (%d attempts); delivered again later", attempts))
	}
	pending := make([]int, 0, len(muts))
	j := new(job) // one job for every attempt: it keeps the call's failures (job.guard)
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
		s.execute(ctx, j, work, pending, results, refs, true)
		retry := pending[:0:0]
		for _, i := range pending {
			outcomes[i].Attempts = attempt
			r := results[i]
			switch {
			case r.Err == nil:
				outcomes[i].Err, outcomes[i].Skipped, outcomes[i].Superseded = nil, r.Skipped, r.Superseded
			case overBudget():
				// Cut short by the budget (even an outcome-unknown write:
				// the applied mark makes its redelivery safe).
				outcomes[i].Err = parked(i, attempt)
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
		if budgeted && time.Until(deadline)-slack <= d {
			// The next attempt would not start within the budget: park
			// what still fails instead of holding the batch.
			for _, i := range retry {
				outcomes[i].Err = parked(i, attempt)
			}
			break
		}
		s.obs.ApplyRetry(d)
		if !ctxtime.Sleep(ctx, d) {
			for _, i := range retry {
				if overBudget() {
					outcomes[i].Err = parked(i, attempt)
				} else {
					outcomes[i].Err = stopped(i)
				}
			}
			break
		}
		pending = retry
	}
	if j.guard != nil {
		settleGuarded(j.guard, outcomes, results)
	}
	return outcomes
}

// settleGuarded sets the outcomes of the failed mutations whose fate a
// later write of their record decided (see overtakeGuard): one handled by
// another worker is skipped (superseded); one this call overtook keeps
// its failure, the one that made it fail (not parked by the end of the
// budget: it cannot be delivered again), and is Overtaken; one whose
// overtaking write had an unknown outcome counts as overtaken.
func settleGuarded(g *overtakeGuard, outcomes []ports.ApplyOutcome, results []WriteResult) {
	for i, st := range g.state {
		switch st {
		case guardHandled:
			r := results[i]
			outcomes[i].Err, outcomes[i].Skipped, outcomes[i].Superseded, outcomes[i].Overtaken = nil, true, r.Superseded, false
		case guardOvertaken, guardMaybe:
			if e := results[i].Err; e != nil {
				outcomes[i].Err = e
			}
			outcomes[i].Overtaken = outcomes[i].Err != nil
		}
	}
}

// ResolveMutations implements ports.MutationResolver: it reads the records
// of the mutations in one storage call and says, from each record's
// applied mark, whether the mutation was applied. A mutation that does not
// validate was never applied.
func (s *Service) ResolveMutations(ctx context.Context, muts []domain.Mutation) []ports.Resolution {
	out := make([]ports.Resolution, len(muts))
	work := make([]domain.Mutation, len(muts))
	copy(work, muts)
	addrs := make([]domain.Address, 0, len(muts))
	at := make([]int, len(muts)) // index in addrs, -1 for none
	for i := range work {
		at[i] = -1
		if s.validateMutation(mutationRef(&work[i]), &work[i]) != nil {
			out[i] = ports.ResolutionNotApplied
			continue
		}
		at[i] = len(addrs)
		addrs = append(addrs, work[i].Address)
	}
	if len(addrs) == 0 {
		return out
	}
	start := time.Now()
	got := s.storage.Read(ctx, addrs)
	s.obs.StorageCall(ports.StorageRead, len(addrs), time.Since(start))
	for i, k := range at {
		if k < 0 {
			continue
		}
		out[i] = resolve(&work[i], got[k])
	}
	return out
}

// resolve says what the read r of m's record tells of m.
func resolve(m *domain.Mutation, r ports.ReadResult) ports.Resolution {
	switch {
	case r.Err != nil:
		return ports.ResolutionUnknown
	case !r.Found && m.Kind == domain.MutationDelete:
		return ports.ResolutionApplied
	case !r.Found:
		return ports.ResolutionNotApplied
	}
	switch cov, _ := r.Record.Mark.Check(m.ID, m.Source); cov {
	case domain.Duplicate:
		return ports.ResolutionApplied
	case domain.Superseded:
		return ports.ResolutionSuperseded
	}
	return ports.ResolutionNotApplied
}
