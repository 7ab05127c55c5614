package application

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// execute applies the validated mutations work[i], i in valid, writing their
// results. Mutations of one record run in slice order; each dependency wave
// (at most one mutation per record) goes to storage as one batch read (for
// merges) and one batch write.
//
// With blockOnFailure (the worker path), once a mutation fails with a
// retryable error, later mutations of the same record are not attempted and
// get a retryable "blocked" error, so that retrying never reorders them.
//
// refs names the mutations in their errors.
func (s *Service) execute(ctx context.Context, work []domain.Mutation, valid []int, results []WriteResult, refs func(int) opRef, blockOnFailure bool) {
	waves := domain.Waves(len(valid), func(j int) domain.RecordID { return work[valid[j]].Address.ID() })
	var blocked map[domain.RecordID]string
	for _, wave := range waves {
		items := make([]int, 0, len(wave))
		for _, j := range wave {
			i := valid[j]
			if blocked != nil {
				if by, ok := blocked[work[i].Address.ID()]; ok {
					results[i] = failed(opErrorf(refs(i), fieldAddress, domain.CodeUnavailable,
						"not attempted: mutation %s before it on the same record failed and must be retried first", by))
					continue
				}
			}
			items = append(items, i)
		}
		s.applyWave(ctx, work, items, results, refs)
		if !blockOnFailure {
			continue
		}
		for _, i := range items {
			if e := results[i].Err; e != nil && e.Retryable {
				if blocked == nil {
					blocked = make(map[domain.RecordID]string)
				}
				blocked[work[i].Address.ID()] = work[i].ID
			}
		}
	}
}

// applyWave applies mutations on distinct records: one storage read for the
// merges, one storage write for everything, then merge retries on conflict.
func (s *Service) applyWave(ctx context.Context, work []domain.Mutation, items []int, results []WriteResult, refs func(int) opRef) {
	if len(items) == 0 {
		return
	}
	ops := make([]ports.WriteOp, 0, len(items))
	owners := make([]int, 0, len(items))
	var merges []int
	for _, i := range items {
		m := &work[i]
		switch m.Kind {
		case domain.MutationPut:
			ops = append(ops, ports.WriteOp{Kind: ports.WritePut, Address: m.Address, Document: m.Document, Condition: putCondition(m)})
			owners = append(owners, i)
		case domain.MutationDelete:
			c := ports.Condition{Kind: ports.ConditionNone}
			if !m.ExpectedRevision.IsZero() {
				c = ports.Condition{Kind: ports.ConditionRevision, Revision: m.ExpectedRevision}
			}
			ops = append(ops, ports.WriteOp{Kind: ports.WriteDelete, Address: m.Address, Condition: c})
			owners = append(owners, i)
		case domain.MutationMerge:
			merges = append(merges, i)
		}
	}
	for attempt := 1; ; attempt++ {
		if len(merges) > 0 {
			mops, mowners := s.prepareMerges(ctx, work, merges, results, refs)
			ops = append(ops, mops...)
			owners = append(owners, mowners...)
		}
		if len(ops) > 0 {
			start := time.Now()
			got := s.storage.Write(ctx, ops)
			s.obs.StorageCall("write", len(ops), time.Since(start))
			for k, r := range got {
				results[owners[k]] = writeResult(refs(owners[k]), &work[owners[k]], r)
			}
		}
		// Merges whose conditional write met a concurrent change are retried.
		var again []int
		for _, i := range merges {
			if e := results[i].Err; e != nil && conflict(e.Code) {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			return
		}
		for _, i := range again {
			s.obs.MergeConflict(work[i].Merge.Profile)
		}
		if attempt >= s.cfg.Merge.MaxAttempts || !sleep(ctx, s.cfg.Merge.backoff(attempt)) {
			for _, i := range again {
				if ctx.Err() != nil {
					results[i] = failed(opError(refs(i), fieldAddress, ctx.Err()))
					continue
				}
				results[i] = failed(opErrorf(refs(i), fieldAddress, domain.CodeAborted,
					"merge kept conflicting with concurrent writes of the same record after %d attempts", attempt))
			}
			return
		}
		merges, ops, owners = again, ops[:0], owners[:0]
	}
}

// prepareMerges reads the merge targets and runs their profiles. Merges that
// fail here get their result; the others become conditional writes.
func (s *Service) prepareMerges(ctx context.Context, work []domain.Mutation, merges []int, results []WriteResult, refs func(int) opRef) ([]ports.WriteOp, []int) {
	addrs := make([]domain.Address, len(merges))
	for k, i := range merges {
		addrs[k] = work[i].Address
	}
	start := time.Now()
	current := s.storage.Read(ctx, addrs)
	s.obs.StorageCall("read", len(addrs), time.Since(start))
	ops := make([]ports.WriteOp, 0, len(merges))
	owners := make([]int, 0, len(merges))
	for k, i := range merges {
		m := &work[i]
		ref := refs(i)
		r := current[k]
		if r.Err != nil {
			results[i] = failed(opError(ref, fieldAddress, r.Err))
			continue
		}
		p := s.profiles[m.Merge.Profile]
		var cur *domain.Document
		cond := ports.Condition{Kind: ports.ConditionAbsent}
		if r.Found {
			cur = &r.Record.Document
			cond = ports.Condition{Kind: ports.ConditionRevision, Revision: r.Record.Revision}
			if !s.accepts(p, cur.ContentType) {
				results[i] = failed(invalid(ref, fieldAddress, "the record holds a document of content type %q, which merge profile %q cannot merge into (it accepts %s)",
					cur.ContentType, p.Name(), strings.Join(p.ContentTypes(), ", ")))
				continue
			}
		}
		doc, err := s.runProfile(ctx, ref, p, ports.MergeInput{Address: m.Address, Current: cur, Intent: m.Merge.Intent, Accept: s.storage.ContentTypes()})
		if err != nil {
			results[i] = failed(err)
			continue
		}
		if err := s.checkMergeResult(ref, p, m, doc); err != nil {
			results[i] = failed(err)
			continue
		}
		ops = append(ops, ports.WriteOp{Kind: ports.WritePut, Address: m.Address, Document: doc, Condition: cond})
		owners = append(owners, i)
	}
	return ops, owners
}

// runProfile runs one merge within its budget: the profile gets a context
// that ends after Config.Merge.Timeout, or earlier when ctx ends.
//
// A merge that does not finish within its budget fails with a
// non-retryable CodeResourceExhausted error, also when the profile
// ignored the context and returned a result late: running the same intent
// on the same record again would most likely take as long, so neither the
// client nor the worker (which dead-letters it at once) should retry it
// as it is. When ctx ended first (the client canceled, or its deadline
// passed), the error has ctx's code.
func (s *Service) runProfile(ctx context.Context, ref opRef, p ports.MergeProfile, in ports.MergeInput) (domain.Document, *domain.Error) {
	mctx, cancel := context.WithTimeout(ctx, s.cfg.Merge.Timeout)
	defer cancel()
	doc, err := p.Merge(mctx, in)
	if mctx.Err() != nil {
		if ctx.Err() != nil {
			e := domain.AsError(ctx.Err())
			return domain.Document{}, opError(ref, fieldIntent, domain.Wrap(e.Code, ctx.Err(), "merge profile %q was stopped", p.Name()))
		}
		return domain.Document{}, newOpError(ref, fieldIntent, domain.CodeResourceExhausted, false,
			"merge profile "+strconv.Quote(p.Name())+" did not finish within the merge time budget of "+s.cfg.Merge.Timeout.String()+
				": the merge costs too much; make the intent or the record smaller", nil)
	}
	if err != nil {
		e := domain.AsError(err)
		if e.Code == domain.CodeInternal {
			e = domain.Wrap(domain.CodeInvalidArgument, err, "merge profile %q rejected the intent", p.Name())
		}
		return domain.Document{}, opError(ref, fieldIntent, e)
	}
	return doc, nil
}

func (s *Service) checkMergeResult(ref opRef, p ports.MergeProfile, m *domain.Mutation, doc domain.Document) *domain.Error {
	if doc.ContentType == "" || len(doc.Data) > s.cfg.Limits.MaxDocumentBytes {
		return invalid(ref, fieldIntent, "merge profile %q produced a document of %d bytes with content type %q; the limit is %d bytes and a content type is required",
			p.Name(), len(doc.Data), doc.ContentType, s.cfg.Limits.MaxDocumentBytes)
	}
	if err := s.storage.Validate(ports.WriteOp{Kind: ports.WritePut, Address: m.Address, Document: doc}); err != nil {
		return opError(ref, fieldIntent, domain.Wrap(domain.CodeOf(err), err, "merge profile %q produced a document the store cannot hold", p.Name()))
	}
	return nil
}

// conflict reports whether a conditional merge write failed because the
// record changed between its read and its write.
func conflict(c domain.Code) bool {
	return c == domain.CodeRevisionMismatch || c == domain.CodeAlreadyExists || c == domain.CodeNotFound
}

func putCondition(m *domain.Mutation) ports.Condition {
	switch {
	case !m.ExpectedRevision.IsZero():
		return ports.Condition{Kind: ports.ConditionRevision, Revision: m.ExpectedRevision}
	case m.Mode == domain.PutCreate:
		return ports.Condition{Kind: ports.ConditionAbsent}
	case m.Mode == domain.PutReplace:
		return ports.Condition{Kind: ports.ConditionExists}
	default:
		return ports.Condition{Kind: ports.ConditionNone}
	}
}

// idempotent reports whether applying m twice has the same effect as once.
func idempotent(m *domain.Mutation) bool {
	if !m.ExpectedRevision.IsZero() {
		return false
	}
	return (m.Kind == domain.MutationPut && m.Mode == domain.PutUpsert) || m.Kind == domain.MutationDelete
}

func writeResult(ref opRef, m *domain.Mutation, r ports.WriteResult) WriteResult {
	if r.Err != nil {
		e := domain.AsError(r.Err)
		if e.Code == domain.CodeOutcomeUnknown && e.Retryable != idempotent(m) {
			c := *e
			c.Retryable = idempotent(m)
			e = &c
		}
		e = opError(ref, storageField(m, e.Code), e)
		return WriteResult{Status: statusOf(e), Err: e}
	}
	if m.Kind == domain.MutationDelete && !r.Existed {
		return WriteResult{Status: StatusNotFound}
	}
	return WriteResult{Status: StatusApplied, Revision: r.Revision}
}
