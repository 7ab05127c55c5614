package application

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Completion names used in observations.
const (
	completionWait     = "wait_until_applied"
	completionAccepted = "return_after_accepted"
)

func (c Completion) label() string {
	if c == ReturnAfterAccepted {
		return completionAccepted
	}
	return completionWait
}

// dataset returns the dataset an operation addressed, with the served
// store filled in when the client left it empty.
func (s *Service) dataset(a domain.Address) domain.DatasetRef {
	d := a.DatasetRef()
	if d.Store == "" {
		d.Store = s.cfg.Store
	}
	return d
}

// observeReads reports the outcomes of one Read request.
func (s *Service) observeReads(ctx context.Context, addrs []domain.Address, results []ReadResult) {
	outcomes := make([]ports.OperationOutcome, len(results))
	errs := make([]*domain.Error, len(results))
	for i, r := range results {
		outcomes[i] = ports.OperationOutcome{
			Source: ports.SourceRequest, Dataset: s.dataset(addrs[i]), Kind: "read",
			Status: r.Status.String(), Code: codeName(r.Err),
		}
		errs[i] = r.Err
	}
	s.obs.Operations(outcomes)
	s.logFailures(ctx, "Read", outcomes, errs)
}

// observeMutations reports the outcomes of one Write or Delete request.
func (s *Service) observeMutations(ctx context.Context, useCase string, work []domain.Mutation, completion Completion, results []WriteResult) {
	outcomes := make([]ports.OperationOutcome, len(results))
	errs := make([]*domain.Error, len(results))
	for i, r := range results {
		outcomes[i] = ports.OperationOutcome{
			Source: ports.SourceRequest, Dataset: s.dataset(work[i].Address), Kind: work[i].Kind.String(),
			Completion: completion.label(), Status: r.Status.String(), Code: codeName(r.Err),
		}
		errs[i] = r.Err
	}
	s.obs.Operations(outcomes)
	s.logFailures(ctx, useCase, outcomes, errs)
}

// observeApplied reports the final outcomes of queued mutations applied by
// the worker. Failures are logged by the consumer, which dead-letters them.
func (s *Service) observeApplied(work []domain.Mutation, outcomes []ports.ApplyOutcome, results []WriteResult) {
	out := make([]ports.OperationOutcome, len(outcomes))
	for i, o := range outcomes {
		oc := ports.OperationOutcome{Source: ports.SourceWorker, Dataset: s.dataset(work[i].Address), Kind: work[i].Kind.String()}
		switch {
		case o.Err == nil && results[i].Status == StatusNotFound:
			oc.Status = StatusNotFound.String()
		case o.Err == nil:
			oc.Status = StatusApplied.String()
		default:
			e := domain.AsError(o.Err)
			oc.Status, oc.Code = statusOf(e).String(), e.Code.String()
		}
		out[i] = oc
	}
	s.obs.Operations(out)
}

func codeName(e *domain.Error) string {
	if e == nil {
		return ""
	}
	return e.Code.String()
}

// logFailures writes one log line per failed operation class (error code)
// of a request: how many operations failed with it, the request id, the RPC,
// and the index, dataset and message of the first such operation. It never
// logs documents.
func (s *Service) logFailures(ctx context.Context, useCase string, outcomes []ports.OperationOutcome, errs []*domain.Error) {
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
		c.datasets[outcomes[i].Dataset] = struct{}{}
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
		d := outcomes[c.first].Dataset
		msg := strconv.Itoa(c.count) + " operations failed: " + c.code.String()
		if c.count == 1 {
			msg = "1 operation failed: " + c.code.String()
		}
		attrs := make([]slog.Attr, 0, 12)
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
			slog.String("store", d.Store),
			slog.String("namespace", d.Namespace),
			slog.String("dataset", d.Dataset),
			slog.String("first_message", first.Error()),
		)
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
	if kindIn(domain.MutationDelete, kinds) {
		return "Delete"
	}
	return "Write"
}
