package application

import (
	"context"
	"log/slog"
	"slices"
	"strconv"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Observer receives the service's measurements: those of its storage
// calls, merges, operations and queued mutations (a metrics adapter
// implements it; ports.NopObserver, the default, discards them).
type Observer interface {
	ports.StorageObserver
	ports.MergeObserver
	ports.OperationObserver
	ports.QueueObserver
}

// observed returns the completion mode of c as observed.
func (c Completion) observed() ports.OperationCompletion {
	if c == ReturnAfterAccepted {
		return ports.CompletionReturnAfterAccepted
	}
	return ports.CompletionWaitUntilApplied
}

// withError returns o with the code of e, if any.
func withError(o ports.OperationOutcome, e *domain.Error) ports.OperationOutcome {
	if e != nil {
		o.HasError, o.Code = true, e.Code
	}
	return o
}

// verdicts records, per operation of a request, what the observers may
// know of it. Client-chosen names become metric labels only for operations
// that passed validation and authorization (admitted), so that invalid and
// denied operations cannot fill the bounded label sets; logs name the
// dataset of every operation whose address was valid (bounded, UTF-8
// names), never one that was rejected.
type verdicts struct {
	// datasets: the dataset of each operation whose address was valid
	// (the served store filled in); zero otherwise.
	datasets []domain.DatasetRef
	admitted []bool
	// outcomes, when not nil, has room for the outcomes reported (pooled
	// with the request's other per-operation state: see opBufs, oneBufs,
	// readBufs). Observers do not keep it (ports.OperationObserver).
	outcomes []ports.OperationOutcome
	// errs, when not nil, has room for the errors to log (see outcomes).
	errs []*domain.Error
}

// outcomeSlice returns a slice of n outcomes to report.
func (v verdicts) outcomeSlice(n int) []ports.OperationOutcome {
	if len(v.outcomes) == n {
		return v.outcomes
	}
	return make([]ports.OperationOutcome, n)
}

// errSlice returns a slice of n errors to log.
func (v verdicts) errSlice(n int) []*domain.Error {
	if len(v.errs) == n {
		return v.errs
	}
	return make([]*domain.Error, n)
}

// labelled returns the dataset of operation i for metrics: zero unless it
// was admitted.
func (v verdicts) labelled(i int) domain.DatasetRef {
	if !v.admitted[i] {
		return domain.DatasetRef{}
	}
	return v.datasets[i]
}

// observeReads reports the outcomes of one Read request.
func (s *Service) observeReads(ctx context.Context, v verdicts, results []ReadResult) {
	outcomes := v.outcomeSlice(len(results))
	errs := v.errSlice(len(results))
	for i, r := range results {
		outcomes[i] = withError(ports.OperationOutcome{
			Source: ports.SourceRequest, Dataset: v.labelled(i), Kind: ports.OperationRead, Status: r.Status,
		}, r.Err)
		errs[i] = r.Err
	}
	s.obs.Operations(outcomes)
	s.logFailures(ctx, "Read", v, errs)
}

// observeMutations reports the outcomes of one Write or Delete request.
func (s *Service) observeMutations(ctx context.Context, useCase string, work []domain.Mutation, v verdicts, completion Completion, results []WriteResult) {
	outcomes := v.outcomeSlice(len(results))
	errs := v.errSlice(len(results))
	for i, r := range results {
		outcomes[i] = withError(ports.OperationOutcome{
			Source: ports.SourceRequest, Dataset: v.labelled(i), Kind: ports.OperationKindOf(work[i].Kind),
			Completion: completion.observed(), Status: r.Status,
		}, r.Err)
		errs[i] = r.Err
	}
	s.obs.Operations(outcomes)
	s.logFailures(ctx, useCase, v, errs)
	skipped := 0
	for i, r := range results {
		if !r.Skipped {
			continue
		}
		skipped++
		if s.log.Enabled(ctx, slog.LevelDebug) {
			attrs := make([]slog.Attr, 0, 5)
			if req := domain.RequestFromContext(ctx); req.ID != "" {
				attrs = append(attrs, slog.String("request_id", req.ID))
			}
			attrs = append(attrs, slog.Int("index", i), slog.String("kind", work[i].Kind.String()),
				slog.String("idempotency_key", work[i].ID), slog.String("coverage", domain.Duplicate.String()))
			s.log.LogAttrs(ctx, slog.LevelDebug, "operation already applied with this idempotency key: answered with the original outcome, nothing written", attrs...)
		}
	}
	if skipped > 0 {
		s.obs.Deduplicated(ports.SourceRequest, domain.Duplicate, skipped)
	}
}

// observeApplied reports the final outcomes of queued mutations applied by
// the worker; only valid mutations are labelled with their dataset.
// Failures are logged by the consumer, which dead-letters them.
func (s *Service) observeApplied(work []domain.Mutation, valid []bool, outcomes []ports.ApplyOutcome, results []WriteResult) {
	out := make([]ports.OperationOutcome, len(outcomes))
	var counts [domain.Superseded + 1]int
	for i, o := range outcomes {
		oc := ports.OperationOutcome{Source: ports.SourceWorker, Kind: ports.OperationKindOf(work[i].Kind)}
		if valid[i] {
			oc.Dataset = work[i].Address.DatasetRef()
		}
		cov := domain.NotCovered
		switch {
		case o.Err == nil && results[i].Superseded:
			oc.Status = ports.StatusSkipped
			cov = domain.Superseded
		case o.Err == nil && results[i].Skipped:
			oc.Status = ports.StatusSkipped
			cov = domain.Duplicate
		case o.Err == nil && results[i].Status == StatusNotFound:
			oc.Status = ports.StatusNotFound
		case o.Err == nil:
			oc.Status = ports.StatusApplied
		default:
			e := domain.AsError(o.Err)
			oc.Status = statusOf(e)
			oc = withError(oc, e)
		}
		out[i] = oc
		if cov != domain.NotCovered {
			counts[cov]++
			s.logSkip(&work[i], cov)
		}
	}
	s.obs.Operations(out)
	for _, c := range []domain.Coverage{domain.Duplicate, domain.Superseded} {
		if counts[c] > 0 {
			s.obs.Deduplicated(ports.SourceWorker, c, counts[c])
		}
	}
}

// logSkip writes the debug line of a queued mutation its record's mark
// covered: its id, kind and log position, no client data.
func (s *Service) logSkip(m *domain.Mutation, cov domain.Coverage) {
	ctx := context.Background()
	if !s.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	msg := "queued mutation already applied to its record: skipped"
	if cov == domain.Superseded {
		msg = "queued mutation whose log position its record's mark already passed: handled before (applied, or dead-lettered for its own failure); skipped"
	}
	s.log.LogAttrs(ctx, slog.LevelDebug, msg,
		slog.String("mutation_id", m.ID), slog.String("kind", m.Kind.String()), slog.String("coverage", cov.String()),
		slog.String("log", m.Source.Log), slog.Int("partition", int(m.Source.Partition)), slog.Int64("offset", m.Source.Offset))
}

// logFailures writes one log line per failed operation class (error code)
// of a request: how many operations failed with it, the request id, the RPC,
// and the index, kind, field and dataset of the first such operation.
//
// It never logs error messages: they may quote what the client sent (an
// intent inside a parser error, a content type, a name that was rejected)
// or what storage holds (the fields and values of a stored document). The
// client gets them in full; the log gets what locates the problem.
func (s *Service) logFailures(ctx context.Context, useCase string, v verdicts, errs []*domain.Error) {
	type class struct {
		code     domain.Code
		first    int
		count    int
		datasets map[domain.DatasetRef]struct{}
	}
	var classes []*class
	for i, e := range errs {
		if e == nil {
			continue
		}
		var c *class
		for _, x := range classes {
			if x.code == e.Code {
				c = x
				break
			}
		}
		if c == nil {
			c = &class{code: e.Code, first: i, datasets: map[domain.DatasetRef]struct{}{}}
			classes = append(classes, c)
		}
		c.count++
		if d := v.datasets[i]; d != (domain.DatasetRef{}) {
			c.datasets[d] = struct{}{}
		}
	}
	if len(classes) == 0 {
		return
	}
	req := domain.RequestFromContext(ctx)
	rpc := req.Method
	if rpc == "" {
		rpc = useCase
	}
	for _, c := range classes {
		first := errs[c.first]
		msg := strconv.Itoa(c.count) + " operations failed: " + c.code.String()
		if c.count == 1 {
			msg = "1 operation failed: " + c.code.String()
		}
		attrs := make([]slog.Attr, 0, 14)
		if req.ID != "" {
			attrs = append(attrs, slog.String("request_id", req.ID))
		}
		attrs = append(attrs,
			slog.String("rpc", rpc),
			slog.String("code", c.code.String()),
			slog.Int("count", c.count),
			slog.Int("operations", len(errs)),
			slog.Bool("retryable", first.Retryable),
			slog.Int("first_index", c.first),
		)
		if d, ok := detailOf(first); ok {
			attrs = append(attrs, slog.String("first_kind", d.ref.kind), slog.String("first_field", d.field))
		}
		if d := v.datasets[c.first]; d != (domain.DatasetRef{}) {
			attrs = append(attrs,
				slog.String("store", d.Store),
				slog.String("namespace", d.Namespace),
				slog.String("dataset", d.Dataset),
			)
		}
		if n := len(c.datasets); n > 1 {
			attrs = append(attrs, slog.Int("datasets", n))
		}
		s.log.LogAttrs(ctx, failureLevel(c.code), msg, attrs...)
	}
}

// failureLevel: errors for Sink's own failures, warnings for failures of
// the infrastructure, info for what the client asked for.
func failureLevel(c domain.Code) slog.Level {
	switch c {
	case domain.CodeInternal:
		return slog.LevelError
	case domain.CodeUnavailable, domain.CodeOutcomeUnknown, domain.CodeAborted, domain.CodeResourceExhausted:
		return slog.LevelWarn
	default:
		return slog.LevelInfo
	}
}

// useCaseOf names the use case of mutate by the kinds it accepts.
func useCaseOf(kinds []domain.MutationKind) string {
	if slices.Contains(kinds, domain.MutationDelete) {
		return "Delete"
	}
	return "Write"
}
