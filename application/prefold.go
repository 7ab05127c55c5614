package application

import (
	"github.com/sink-io/sink/domain"
)

// prefold is the merges of one record that callers ran while they waited
// for their batch (see Service.prefold): each applied, in the order the
// callers queued, to the result of the one before, starting from the state
// of generation gen.
type prefold struct {
	gen     uint64
	batches uint64 // hintTable.batches when it was made
	items   []item
	steps   []foldStep
	cur     domain.Document // the last good result (the base while there is none)
}

// foldStep is one merge's outcome in a fold: the document it produced, or
// its error.
type foldStep struct {
	doc domain.Document
	err *domain.Error
}

// prefoldable reports whether a queued job is a single merge that a
// prefold can run ahead: a synchronous merge without an idempotency key
// (so no applied mark to check or extend) that blocks nothing.
func prefoldable(j *job) (item, bool) {
	if len(j.valid) != 1 || j.blockOnFailure || j.queued {
		return item{}, false
	}
	it := item{j, j.valid[0]}
	return it, it.merge() && it.markID() == ""
}

// prefold runs a queued single merge's profile while its caller waits for
// the batch at storage to return, so that the merge's work overlaps that
// round trip instead of adding to the time between two writes of the
// record. The merge applies to the record's prefold so far, or else to the
// state the batch at storage is writing, or else to the record's hint; a
// record with none of them (it must be read) is not prefolded.
//
// It is the write combiner's queued hook: called under the combiner's lock,
// in queue order, it picks the merge's starting point and returns the merge
// to run once that lock is released. One prefold runs at a time per shard,
// so that a record's prefold holds its merges in queue order; a caller that
// queues while another prefold runs is not prefolded (its batch runs its
// merge as usual). No lock is held while a profile runs, so a slow profile
// delays neither the callers that queue nor the batch that takes the
// prefold.
//
// The prefold is a guess that the record's fold in the next batch will
// start from that state and begin with these merges. The fold uses it only
// when both hold (see takePrefold): its write is the same read-modify-write
// the fold would have made, conditional on the revision of that state.
// Otherwise (the write at storage failed, another writer wrote the record,
// a put or another caller's merge comes first in the batch, a caller left
// the queue) the fold runs its merges as without it; only the work is
// lost.
func (s *Service) prefold(h *hintTable, j *job) func() {
	it, ok := prefoldable(j)
	if !ok {
		return nil
	}
	id := it.rid()
	h.preMu.Lock()
	defer h.preMu.Unlock()
	if h.prefolding {
		return nil
	}
	base, ok := h.base(id)
	if !ok || base.gen == 0 {
		return nil
	}
	pf := h.pre[id]
	if pf == nil || pf.gen != base.gen {
		if pf == nil && len(h.pre) >= hintsMax {
			return nil
		}
		pf = &prefold{gen: base.gen, batches: h.batches, cur: base.doc}
		if h.pre == nil {
			h.pre = make(map[domain.RecordID]*prefold)
		}
		h.pre[id] = pf
	}
	cur, n := pf.cur, len(pf.items)
	h.prefolding = true
	return func() {
		finished := false
		defer func() {
			if !finished { // the profile panicked: free the slot, keep nothing
				h.preMu.Lock()
				h.prefolding = false
				h.preMu.Unlock()
			}
		}()
		doc, err := s.mergeOne(it, &cur)
		finished = true
		h.preMu.Lock()
		defer h.preMu.Unlock()
		h.prefolding = false
		if h.pre[id] != pf || len(pf.items) != n {
			return // taken by its batch, or replaced, meanwhile
		}
		pf.items = append(pf.items, it)
		pf.steps = append(pf.steps, foldStep{doc: doc, err: err})
		if err == nil {
			pf.cur = doc
		}
	}
}

// takePrefold removes the record's prefold. When the fold u starts from
// the state of generation gen, and it and the prefold begin with the same
// merges, it returns the outcomes of those (the steps of the longest
// such run: u may go on with merges that were not prefolded, the prefold
// with merges that come later than u); nil otherwise.
func (h *hintTable) takePrefold(id domain.RecordID, gen uint64, u unit) []foldStep {
	if h == nil {
		return nil
	}
	h.preMu.Lock()
	pf := h.pre[id]
	delete(h.pre, id)
	h.preMu.Unlock()
	if pf == nil || gen == 0 || pf.gen != gen {
		return nil
	}
	n := 0
	for n < len(pf.items) && n < len(u) && pf.items[n] == u[n] {
		n++
	}
	if n == 0 {
		return nil
	}
	return pf.steps[:n]
}
