package application

import (
	"context"
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
func (s *Service) execute(ctx context.Context, work []domain.Mutation, valid []int, results []WriteResult, blockOnFailure bool) {
	waves := domain.Waves(len(valid), func(j int) domain.RecordID { return work[valid[j]].Address.ID() })
	var blocked map[domain.RecordID]string
	for _, wave := range waves {
		items := make([]int, 0, len(wave))
		for _, j := range wave {
			i := valid[j]
			if blocked != nil {
				if by, ok := blocked[work[i].Address.ID()]; ok {
					results[i] = failed(&domain.Error{Code: domain.CodeUnavailable, Retryable: true,
						Message: "not attempted: mutation " + by + " before it on the same record failed and must be retried first"})
					continue
				}
			}
			items = append(items, i)
		}
		s.applyWave(ctx, work, items, results)
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
func (s *Service) applyWave(ctx context.Context, work []domain.Mutation, items []int, results []WriteResult) {
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
			mops, mowners := s.prepareMerges(ctx, work, merges, results)
			ops = append(ops, mops...)
			owners = append(owners, mowners...)
		}
		if len(ops) > 0 {
			start := time.Now()
			got := s.storage.Write(ctx, ops)
			s.obs.StorageCall("write", len(ops), time.Since(start))
			for k, r := range got {
				results[owners[k]] = writeResult(&work[owners[k]], r)
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
				results[i] = failed(&domain.Error{Code: domain.CodeAborted, Retryable: true,
					Message: "merge kept conflicting with concurrent writes of the same record after " + itoa(attempt) + " attempts"})
			}
			if ctx.Err() != nil {
				for _, i := range again {
					results[i] = failed(ctx.Err())
				}
			}
			return
		}
		merges, ops, owners = again, ops[:0], owners[:0]
	}
}

// prepareMerges reads the merge targets and runs their profiles. Merges that
// fail here get their result; the others become conditional writes.
func (s *Service) prepareMerges(ctx context.Context, work []domain.Mutation, merges []int, results []WriteResult) ([]ports.WriteOp, []int) {
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
		r := current[k]
		if r.Err != nil {
			results[i] = failed(r.Err)
			continue
		}
		p := s.profiles[m.Merge.Profile]
		var cur *domain.Document
		cond := ports.Condition{Kind: ports.ConditionAbsent}
		if r.Found {
			cur = &r.Record.Document
			cond = ports.Condition{Kind: ports.ConditionRevision, Revision: r.Record.Revision}
			if !accepts(p, cur.ContentType) {
				results[i] = failed(domain.Errorf(domain.CodeInvalidArgument,
					"merge profile %q cannot merge into a record of content type %q", p.Name(), cur.ContentType))
				continue
			}
		}
		doc, err := p.Merge(ctx, ports.MergeInput{Address: m.Address, Current: cur, Intent: m.Merge.Intent, Accept: s.storage.ContentTypes()})
		if err != nil {
			e := domain.AsError(err)
			if e.Code == domain.CodeInternal {
				e = domain.Wrap(domain.CodeInvalidArgument, err, "merge profile %q rejected the intent", p.Name())
			}
			results[i] = failed(e)
			continue
		}
		if err := s.checkMergeResult(p, m, doc); err != nil {
			results[i] = failed(err)
			continue
		}
		ops = append(ops, ports.WriteOp{Kind: ports.WritePut, Address: m.Address, Document: doc, Condition: cond})
		owners = append(owners, i)
	}
	return ops, owners
}

func (s *Service) checkMergeResult(p ports.MergeProfile, m *domain.Mutation, doc domain.Document) *domain.Error {
	if doc.ContentType == "" || len(doc.Data) > s.cfg.Limits.MaxDocumentBytes {
		return domain.Errorf(domain.CodeInvalidArgument, "merge profile %q produced a document of %d bytes with content type %q; the limit is %d bytes and a content type is required",
			p.Name(), len(doc.Data), doc.ContentType, s.cfg.Limits.MaxDocumentBytes)
	}
	if err := s.storage.Validate(ports.WriteOp{Kind: ports.WritePut, Address: m.Address, Document: doc}); err != nil {
		return domain.Wrap(domain.CodeOf(err), err, "merge profile %q produced a document the store cannot hold", p.Name())
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

func writeResult(m *domain.Mutation, r ports.WriteResult) WriteResult {
	if r.Err != nil {
		e := domain.AsError(r.Err)
		if e.Code == domain.CodeOutcomeUnknown && e.Retryable != idempotent(m) {
			c := *e
			c.Retryable = idempotent(m)
			e = &c
		}
		return WriteResult{Status: statusOf(e), Err: e}
	}
	if m.Kind == domain.MutationDelete && !r.Existed {
		return WriteResult{Status: StatusNotFound}
	}
	return WriteResult{Status: StatusApplied, Revision: r.Revision}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
