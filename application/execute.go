package application

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/ctxtime"
	"github.com/sink-io/sink/ports"
)

// job is one caller's mutations to apply: the validated mutations
// work[i], i in valid, whose results go to results[i]. refs names them in
// their errors (nil: requestRef, by their kind). ctx is the caller's: it
// bounds its merge profiles and ends its wait.
type job struct {
	ctx     context.Context
	work    []domain.Mutation
	valid   []int
	results []WriteResult
	refs    func(int) opRef
	// ids[i]: the record ID of work[i], for i in valid (encoded once).
	ids            []domain.RecordID
	blockOnFailure bool
	// shard is the write shard of the job's records, when it is batched.
	shard int
	// queued: the mutations come from the mutation log (the worker path,
	// the same callers as blockOnFailure): every one leaves its ID and log
	// position in its record's applied mark. Synchronous mutations leave
	// their ID only when it is a client's idempotency key.
	queued bool
	// own is the caller's results slice while another caller's batch
	// carries the job (see carryJob); results is then the job's own.
	own []WriteResult
	// guard, of a queued job, holds its failed mutations once one failed
	// (see overtakeGuard); it outlives execute, for the caller's later
	// attempts with the same job.
	guard *overtakeGuard
	// wave and fold, when not nil, are the buffers of a request of one
	// mutation (oneBufs) for the first wave of one unit and the first fold
	// of one record that carry its mutation (see takeWave, takeFold): each
	// is used once, then set to nil.
	wave *waveBufs
	fold *foldBufs

	// The job's allocation also holds its waiter in its shard's combiner
	// and, for a job of one mutation, its record ID and its unit (see
	// applyJobs).
	waiter waiter[*job]
	oneID  [1]domain.RecordID
	one    [1]item
	units  [1]unit
}

// carryJob is the write combiners' carry: a synchronous caller carried in
// another caller's batch may leave it at its deadline. The batch then
// writes the job's results into a slice of the job's own, copied to the
// caller's when the batch ends (execute), so that a caller that left
// reads nothing the batch still writes. A worker's job (queued) stays to
// the end: the worker decides on each mutation's outcome (acknowledge,
// resolve, park or dead-letter) and must know it.
func carryJob(j *job) bool {
	if j.queued {
		return false
	}
	j.own, j.results = j.results, make([]WriteResult, len(j.results))
	return true
}

// ref names work[i] in errors.
func (j *job) ref(i int) opRef {
	if j.refs == nil {
		return requestRef(i, j.work[i].Kind)
	}
	return j.refs(i)
}

// execute applies the validated mutations work[i], i in valid, writing their
// results. Mutations of one record run in slice order; each dependency wave
// goes to storage as one batch read (for merges) and one batch write, and
// consecutive merges of one record fold into one read-modify-write (see
// applyWave).
//
// With natural batching (Config.Batch), the mutations of callers that
// execute at the same time (requests and worker batches) whose records
// fall in one shard are applied together, in arrival order: see combiner.
//
// With blockOnFailure (the worker path), once a mutation fails with a
// retryable error, later mutations of the same record are not attempted and
// get a retryable "blocked" error, so that retrying never reorders them.
//
// Applied marks: every mutation is checked against, and recorded in, its
// record's applied mark (domain.AppliedMark) when it has a mark ID (see
// item.markID): one already applied (Duplicate) is skipped and reported
// applied with the revision its first write produced (WriteResult.Skipped);
// one whose log position the mark already passed (Superseded) was handled
// by some worker before: it is skipped too (WriteResult.Superseded), never
// applied out of order and never dead-lettered.
//
// refs names the mutations in their errors (nil: requestRef, by their
// kind). j, when not nil, is a zero job to use (callers that allocate it
// with their own per-request state; its ids, when they have room for
// work's, are used for the record IDs).
//
// It reports whether the caller left the batch carrying the job at its
// deadline (see carryJob): the batch may then still read work, valid and
// the job's IDs, so the caller must not reuse them (see opBufs).
func (s *Service) execute(ctx context.Context, j *job, work []domain.Mutation, valid []int, results []WriteResult, refs func(int) opRef, blockOnFailure bool) (left bool) {
	if j == nil {
		j = new(job)
	}
	ids := j.ids
	*j = job{ctx: ctx, work: work, valid: valid, results: results, refs: refs, blockOnFailure: blockOnFailure, queued: blockOnFailure, guard: j.guard, wave: j.wave, fold: j.fold}
	switch {
	case len(ids) == len(work):
		j.ids = ids
	case len(work) == 1:
		j.ids = j.oneID[:]
	default:
		j.ids = make([]domain.RecordID, len(work))
	}
	recordIDs(work, valid, j.ids)
	shard := -1
	if s.writes != nil {
		shard = s.shardOf(len(valid), func(k int) (string, domain.RecordID) { return work[valid[k]].Address.Store, j.ids[valid[k]] })
	}
	if shard < 0 {
		s.applyJobs(ctx, []*job{j}, nil)
		return false
	}
	j.shard = shard
	j.waiter.item, j.waiter.ctx = j, ctx
	err := s.writes[shard].do(&j.waiter)
	switch {
	case errors.Is(err, errLeftBatch):
		// The caller's context ended while the batch carrying its
		// mutations was at storage: they may have been applied, or may
		// still be.
		for _, i := range valid {
			m := &work[i]
			results[i] = failed(opError(j.ref(i), fieldAddress, &domain.Error{Code: domain.CodeOutcomeUnknown, Retryable: m.Keyed || idempotent(m), Cause: ctx.Err(),
				Message: "the request ended (" + ctx.Err().Error() + ") while the mutation was at storage in a batch shared with other requests; it may have been applied"}))
		}
		return true
	case err != nil:
		// It left the queue: nothing of it was written.
		for _, i := range valid {
			results[i] = failed(opError(j.ref(i), fieldAddress, domain.Wrap(stoppedCode(err), err, "stopped before the mutation was attempted; nothing was written")))
		}
	case j.own != nil:
		for _, i := range valid {
			j.own[i] = j.results[i]
		}
	}
	return false
}

// recordIDs sets ids[i] to the record ID of work[i], for i in valid. The
// IDs of several are encoded into one string, which they share (one
// allocation, or a few, instead of one each): an ID kept (a hint, see
// hintTable) keeps its request's IDs, a few bytes per operation.
func recordIDs(work []domain.Mutation, valid []int, ids []domain.RecordID) {
	if len(valid) == 1 {
		i := valid[0]
		ids[i] = work[i].Address.ID()
		return
	}
	sc := getIDScratch(len(valid))
	buf, ends := sc.buf[:0], sc.ends[:len(valid)]
	for k, i := range valid {
		buf = domain.AppendAddress(buf, work[i].Address)
		ends[k] = len(buf)
	}
	all, start := string(buf), 0 // (the one allocation: a copy of exactly the IDs' bytes)
	for k, i := range valid {
		ids[i] = domain.RecordID(all[start:ends[k]])
		start = ends[k]
	}
	sc.buf = buf
	sc.release()
}

// runWrites is the write combiner's batch: the jobs of callers that waited
// together, applied as one.
func (s *Service) runWrites(ctx context.Context, batch []*waiter[*job]) {
	jobs := make([]*job, len(batch))
	for i, w := range batch {
		jobs[i] = w.item
	}
	s.obs.Combined(ports.StorageWrite, len(jobs))
	var h *hintTable
	if s.keepsHints() {
		h = &s.writes[jobs[0].shard].hints // (every job of a batch is on records of its shard)
		h.begin()
	}
	s.applyJobs(ctx, jobs, h)
}

// keepsHints reports whether the service keeps last-written-state hints
// (see hintTable): with natural batching, unless the storage says it does
// not read back what it was given (ports.ReadBackReporter); without them
// every fold of merges reads its record.
func (s *Service) keepsHints() bool {
	if s.writes == nil {
		return false
	}
	r, ok := s.storage.(ports.ReadBackReporter)
	return !ok || r.ReadsBackWrites()
}

// dropHint forgets the hint of a record (of store) written outside its
// shard's batches.
func (s *Service) dropHint(store string, id domain.RecordID) {
	if s.writes != nil {
		s.writes[s.shardOf(1, func(int) (string, domain.RecordID) { return store, id })].hints.drop(id)
	}
}

// item is one mutation of a job.
type item struct {
	j *job
	i int
}

func (it item) m() *domain.Mutation { return &it.j.work[it.i] }
func (it item) ref() opRef          { return it.j.ref(it.i) }

// setWrite sets the result of a storage write (naming the operation
// only for an error).
func (it item) setWrite(r ports.WriteResult) {
	ref := opRef{}
	if r.Err != nil {
		ref = it.ref()
	}
	it.j.results[it.i] = writeResult(ref, it.m(), r, it.markID() != "")
}

func (it item) fail(err *domain.Error) { it.j.results[it.i] = failed(err) }

// setDocument puts the document written into an applied, not skipped,
// result of a mutation that asked for it.
func (it item) setDocument(doc *domain.Document) {
	r := &it.j.results[it.i]
	if it.m().ReturnDocument && r.Status == StatusApplied && !r.Skipped {
		d := *doc
		r.Document = &d
	}
}

// skip sets the result of a mutation found already applied: applied, with
// the revision the write that applied it produced.
func (it item) skip(rev domain.Revision) {
	r := WriteResult{Status: StatusApplied, Revision: rev, Skipped: true}
	if it.m().Kind == domain.MutationDelete {
		r.Revision = ""
	}
	it.j.results[it.i] = r
}

// supersede skips a queued mutation whose log position the record's mark
// already passed without holding its ID (see WriteResult.Superseded).
func (it item) supersede() { it.j.results[it.i] = superseded() }

// superseded is the result of a queued mutation its record's mark passed.
func superseded() WriteResult {
	return WriteResult{Status: StatusApplied, Skipped: true, Superseded: true}
}

// markID is the ID the mutation leaves in its record's applied mark: a
// queued mutation's ID, a synchronous mutation's only when it is a
// client's idempotency key; "" for none.
func (it item) markID() string {
	m := it.m()
	if it.j.queued || m.Keyed {
		return m.ID
	}
	return ""
}

// pos is the mutation's log position (zero for synchronous mutations).
func (it item) pos() domain.SourcePosition {
	if it.j.queued {
		return it.m().Source
	}
	return domain.SourcePosition{}
}
func (it item) rid() domain.RecordID   { return it.j.ids[it.i] }
func (it item) merge() bool            { return it.j.work[it.i].Kind == domain.MutationMerge }
func (it item) retryableFailure() bool { e := it.j.results[it.i].Err; return e != nil && e.Retryable }
func (it item) finalFailure() bool     { e := it.j.results[it.i].Err; return e != nil && !e.Retryable }

// unit is what one wave does to one record: one put or delete, or a fold of
// consecutive merges (in arrival order) applied as one read-modify-write.
type unit []item

// blockKey names a record of one job (blocking is per job).
type blockKey struct {
	j   *job
	rid domain.RecordID
}

// applyJobs applies the jobs' valid mutations, in job order. Each record's
// mutations form a sequence of units (a put, a delete, or a run of
// consecutive merges folded into one); unit k of every record goes to wave
// k, so that a wave touches each record at most once and a fold never
// crosses a put or delete of its record.
//
// h holds the hints of the jobs' shard when the jobs are a batch of its
// combiner, nil otherwise (see applyWave).
func (s *Service) applyJobs(ctx context.Context, jobs []*job, h *hintTable) {
	if j := jobs[0]; len(jobs) == 1 && len(j.valid) == 1 { // one mutation: one unit, one wave
		j.one[0] = item{j, j.valid[0]}
		j.units[0] = j.one[:]
		s.applyWave(ctx, j.units[:], h)
		return
	}
	s.applyWaves(ctx, jobs, h)
}

// applyWaves is applyJobs for more than one mutation. (A function of its
// own, so that a single mutation's stack does not carry its frame.)
func (s *Service) applyWaves(ctx context.Context, jobs []*job, h *hintTable) {
	type seq = wavesSeq
	n := 0
	for _, j := range jobs {
		n += len(j.valid)
	}
	var waves [][]unit
	sc := getWavesScratch(n)
	defer sc.release()
	records := sc.records
	// The units' first items, in one allocation; each unit's capacity is
	// its length, so that a fold's further merges move it out.
	firsts := sc.firsts
	for _, j := range jobs {
		for _, i := range j.valid {
			it := item{j, i}
			rid := it.rid()
			r, ok := records[rid]
			if !ok {
				r = seq{last: -1}
			}
			if r.last >= 0 && it.merge() {
				w := waves[r.n-1]
				if u := w[r.last]; u[0].merge() {
					w[r.last] = append(u, it)
					continue
				}
			}
			if r.n == len(waves) {
				var w []unit
				if r.n == 0 {
					w = sc.first // every record has a unit in the first wave
				}
				waves = append(waves, w)
			}
			firsts = append(firsts, it)
			waves[r.n] = append(waves[r.n], firsts[len(firsts)-1:len(firsts):len(firsts)])
			r.last = len(waves[r.n]) - 1
			r.n++
			records[rid] = r
		}
	}
	var blocked map[blockKey]string
	for _, wave := range waves {
		units := wave // (nothing blocked: every unit as it is)
		if blocked != nil {
			units = make([]unit, 0, len(wave))
			for _, u := range wave {
				kept := u[:0:0]
				for _, it := range u {
					if by, ok := blocked[blockKey{it.j, it.rid()}]; ok {
						it.fail(opErrorf(it.ref(), fieldAddress, domain.CodeUnavailable,
							"not attempted: mutation %s before it on the same record failed and must be retried first", by))
						continue
					}
					kept = append(kept, it)
				}
				if len(kept) > 0 {
					units = append(units, kept)
				}
			}
		}
		s.applyWave(ctx, units, h)
		for _, u := range units {
			for _, it := range u {
				switch {
				case it.j.blockOnFailure && it.retryableFailure():
					if blocked == nil {
						blocked = make(map[blockKey]string)
					}
					k := blockKey{it.j, it.rid()}
					if _, ok := blocked[k]; !ok {
						blocked[k] = it.m().ID
					}
				case it.j.queued && it.finalFailure():
					// A later write of the record in this call decides
					// whether it overtakes it (see overtakeGuard).
					guardOf(it.j).add(it.rid(), it.i)
				}
			}
		}
	}
}

// applyWave applies units on distinct records: one storage read for the
// folds of merges, one storage write for everything, then fold retries on
// conflict.
//
// A fold reads its record once, runs its merges' profiles one after another
// in arrival order, each on the result of the one before, and writes the
// last result once, conditional on the revision it read. A merge whose
// profile fails gets its own error; the next one applies to the last good
// document. Every merge of a fold that was written reports the revision of
// that single write. When the write meets a concurrent change, the whole
// fold is retried: re-read, every merge applied again.
//
// With hints (h, the shard's hintTable, when the wave is part of a batch of
// its combiner), a fold of a record the service itself wrote last starts
// from that written state instead of reading it; the write is still
// conditional on its revision. Every successful put (of a document or of a
// fold) leaves a hint; a conflict, a failed or unknown outcome, or a delete
// drops it. Without h (a caller outside the batches), the wave only drops
// the hints of the records it writes.
func (s *Service) applyWave(ctx context.Context, units []unit, h *hintTable) {
	if len(units) == 0 {
		return
	}
	var b *waveBufs
	var p *waveSlices
	if len(units) == 1 {
		if b = units[0][0].j.takeWave(); b == nil {
			b = new(waveBufs)
		}
	} else {
		p = getWaveSlices(len(units))
		defer p.release()
	}
	ops, owners, bases, folds := s.waveWrites(units, b, p)
	for attempt := 1; ; attempt++ {
		var written []*foldWrite // per write op: the fold it carries (nil for puts and deletes)
		if len(folds) > 0 {
			if b != nil && len(ops)+len(folds) <= len(b.written) {
				written = b.written[: len(ops) : len(ops)+len(folds)]
				clear(written)
			} else if p != nil && len(ops)+len(folds) <= cap(p.written) {
				written = p.written[: len(ops) : len(ops)+len(folds)]
				clear(written)
			} else {
				written = make([]*foldWrite, len(ops), len(ops)+len(folds))
			}
			mops, mowners, members := s.prepareFolds(ctx, folds, h)
			ops = append(ops, mops...)
			owners = append(owners, mowners...)
			written = append(written, members...)
			for _, f := range members {
				bases = append(bases, f.base)
			}
		}
		var again []unit
		if len(ops) > 0 {
			var rids []domain.RecordID
			var gens []uint64 // per op: the generation of the state a put writes, for the hint it leaves
			if b != nil && len(ops) <= len(b.rids) {
				rids, gens = b.rids[:len(ops)], b.gens[:len(ops)]
			} else if p != nil && len(ops) <= cap(p.rids) {
				rids, gens = p.rids[:len(ops)], p.gens[:len(ops)]
			} else {
				rids, gens = make([]domain.RecordID, len(ops)), make([]uint64, len(ops))
			}
			for k := range ops {
				rids[k] = owners[k][0].rid()
			}
			if h != nil {
				h.pend(ops, rids, gens)
			} else {
				gens = nil
			}
			start := time.Now()
			got := s.storage.Write(ctx, ops)
			s.obs.StorageCall(ports.StorageWrite, len(ops), time.Since(start))
			again = s.settleWrites(got, ops, owners, bases, written, rids, gens, h)
		}
		if len(again) == 0 {
			return
		}
		for _, u := range again {
			for _, it := range u {
				if it.merge() { // (not a guarded put: see overtakeGuard)
					s.obs.MergeConflict(it.m().Merge.Profile)
				}
			}
		}
		if attempt >= s.cfg.Merge.MaxAttempts || !ctxtime.Sleep(ctx, s.cfg.Merge.backoff(attempt)) {
			giveUp(ctx, again, attempt)
			return
		}
		folds, ops, owners, bases = again, ops[:0], owners[:0], bases[:0]
	}
}

// giveUp fails the merges of folds that kept conflicting after attempts
// attempts, or whose wait for the next one ended with ctx.
func giveUp(ctx context.Context, folds []unit, attempts int) {
	for _, u := range folds {
		for _, it := range u {
			if err := it.j.ctx.Err(); err != nil {
				it.fail(opError(it.ref(), fieldAddress, err))
				continue
			}
			if ctx.Err() != nil {
				it.fail(opError(it.ref(), fieldAddress, ctx.Err()))
				continue
			}
			what := "merge"
			if !it.merge() {
				what = "put" // (a guarded put: see overtakeGuard)
			}
			it.fail(opErrorf(it.ref(), fieldAddress, domain.CodeAborted,
				"%s kept conflicting with concurrent writes of the same record after %d attempts", what, attempts))
		}
	}
}

// settleWrites takes the storage's answers to a wave's write ops: it
// leaves or drops each record's hint, sets the results of the puts,
// deletes and folds written, and returns the folds that met a concurrent
// change (to retry). Per op k: owners[k] is its unit, bases[k] the mark
// it started from, written[k] the fold it carries (nil: a put or delete;
// written itself is nil without folds), rids[k] its record and gens[k]
// the generation of the state it writes (gens is nil without hints).
func (s *Service) settleWrites(got []ports.WriteResult, ops []ports.WriteOp, owners []unit, bases []knownMark, written []*foldWrite, rids []domain.RecordID, gens []uint64, h *hintTable) (again []unit) {
	for k, r := range got {
		if k < len(ops) {
			rid := rids[k]
			switch {
			case h == nil:
				s.dropHint(ops[k].Address.Store, rid)
			case r.Err == nil && ops[k].Kind == ports.WritePut:
				b := bases[k]
				if !r.Existed && (written == nil || written[k] == nil) { // a put that created the record: its mark was empty
					b = knownMark{known: true}
				}
				h.set(rid, recordState{doc: ops[k].Document, rev: r.Revision, mark: b.after(ops[k].Mark, r.Revision), gen: gens[k]})
			default:
				h.drop(rid)
			}
		}
		if written == nil || written[k] == nil {
			it := owners[k][0]
			it.setWrite(r)
			if r.Err == nil && k < len(ops) {
				it.setDocument(&ops[k].Document)
			}
			continue
		}
		if c := domain.CodeOf(r.Err); r.Err != nil && (conflict(c) || c == domain.CodeAlreadyApplied || c == domain.CodeSuperseded) {
			// The record changed since it was read (for a mark: a
			// concurrent writer applied one of the fold's
			// mutations, or a later one): re-read and check each
			// member again.
			again = append(again, owners[k])
			continue
		}
		if over := written[k].overtakes; over != nil {
			settleOvertaking(over, rids[k], r)
		}
		for n, it := range written[k].applied {
			it.setWrite(r)
			if r.Err == nil && n < len(written[k].docs) {
				it.setDocument(&written[k].docs[n])
			}
		}
		for _, it := range written[k].dups {
			it.setWrite(r)
			if r.Err == nil {
				it.skip(r.Revision)
			}
		}
	}
	return again
}

// takeWave returns the job's wave buffers (nil: it has none, or they
// were taken) and leaves it none: a wave of one unit that starts with one
// of the job's items uses them instead of allocating its own. Only the
// goroutine applying the wave that holds the job's item calls it, and a
// job of one mutation is in one wave at a time.
func (j *job) takeWave() *waveBufs {
	b := j.wave
	j.wave = nil
	return b
}

// takeFold is takeWave for the buffers of a fold (prepareFolds).
func (j *job) takeFold() *foldBufs {
	b := j.fold
	j.fold = nil
	return b
}

// waveBufs holds the per-wave slices of applyWave for a wave of one unit
// (every wave of a single-operation request) in one allocation instead of
// six. The slices of one attempt are done with before the next begins,
// which reuses them.
type waveBufs struct {
	ops     [1]ports.WriteOp
	owners  [1]unit
	bases   [1]knownMark
	folds   [1]unit
	written [1]*foldWrite
	rids    [1]domain.RecordID
	gens    [1]uint64
}

// waveWrites returns the write ops of a wave's puts and deletes, with
// the unit (owner) and the known base mark of each, and the wave's folds
// of merges (which prepareFolds turns into write ops). b, when not nil,
// holds the slices of a wave of one unit; p, when not nil, pooled slices
// with room for units.
func (s *Service) waveWrites(units []unit, b *waveBufs, p *waveSlices) (ops []ports.WriteOp, owners []unit, bases []knownMark, folds []unit) {
	// bases: per write op, the record's applied mark before it, as far as
	// the service knows it (for the hint the write leaves).
	if b != nil && len(units) == 1 {
		ops, owners, bases, folds = b.ops[:0], b.owners[:0], b.bases[:0], b.folds[:0]
	} else if p != nil && len(units) <= cap(p.ops) {
		ops, owners, bases = p.ops[:0], p.owners[:0], p.bases[:0]
	} else {
		ops, owners, bases = make([]ports.WriteOp, 0, len(units)), make([]unit, 0, len(units)), make([]knownMark, 0, len(units))
	}
	marks := newMarkAlloc(len(units))
	for _, u := range units {
		it := u[0]
		m := it.m()
		switch m.Kind {
		case domain.MutationPut:
			if guardedUnit(u) {
				// Written conditional on the record it reads (see
				// overtakeGuard), like a fold.
				folds = append(folds, u)
				continue
			}
			ops = append(ops, ports.WriteOp{Kind: ports.WritePut, Address: m.Address, Document: m.Document, Condition: putCondition(m), Mark: s.markUpdate(it, marks), HandOver: true})
			owners = append(owners, u)
			// What the record's mark holds before an unconditional put is
			// not known (a hint may be stale); see the hint it leaves.
			bases = append(bases, knownMark{})
		case domain.MutationDelete:
			c := ports.Condition{Kind: ports.ConditionNone}
			if !m.ExpectedRevision.IsZero() {
				c = ports.Condition{Kind: ports.ConditionRevision, Revision: m.ExpectedRevision}
			}
			ops = append(ops, ports.WriteOp{Kind: ports.WriteDelete, Address: m.Address, Condition: c, Mark: s.markUpdate(it, marks)})
			owners = append(owners, u)
			bases = append(bases, knownMark{})
		case domain.MutationMerge:
			folds = append(folds, u)
		}
	}
	return ops, owners, bases, folds
}

// markUpdate is the mark a put or delete writes: its mark ID and log
// position, nil when it has neither (a synchronous write without an
// idempotency key keeps the record's mark as it is).
func (s *Service) markUpdate(it item, a *markAlloc) *ports.MarkUpdate {
	id, pos := it.markID(), it.pos()
	if id == "" && pos.IsZero() {
		return nil
	}
	u := a.update()
	u.Position, u.Keep = pos, s.cfg.IdempotencyRing
	if id != "" {
		u.IDs = a.ids(id)
	}
	return u
}

// markAlloc hands out the mark updates of one wave from a few shared
// allocations (a wave of 500 puts would otherwise allocate 1000 times).
// Nothing is allocated until the first update (synchronous writes without
// keys have none).
type markAlloc struct {
	n       int // expected updates
	updates []ports.MarkUpdate
	idBuf   []string
}

func newMarkAlloc(n int) *markAlloc { return &markAlloc{n: n} }

// update returns a new zero update.
func (a *markAlloc) update() *ports.MarkUpdate {
	if len(a.updates) == cap(a.updates) {
		a.updates = make([]ports.MarkUpdate, 0, max(a.n, 8))
	}
	a.updates = a.updates[:len(a.updates)+1]
	return &a.updates[len(a.updates)-1]
}

// ids returns a slice holding ids, which the caller may append to.
func (a *markAlloc) ids(ids ...string) []string {
	if cap(a.idBuf)-len(a.idBuf) < len(ids) {
		a.idBuf = make([]string, 0, max(a.n, 8, len(ids)))
	}
	start := len(a.idBuf)
	a.idBuf = append(a.idBuf, ids...)
	return a.idBuf[start:len(a.idBuf):len(a.idBuf)]
}

// foldWrite is what one fold's write carries: the merges it applies, and
// the members that are repeats of one of them (the same mutation ID twice
// in the fold, like a dead-letter replay next to the original), which are
// applied by the same write and reported skipped.
type foldWrite struct {
	applied []item
	// docs[n] is the record's state after applied[n]'s merge; kept only
	// from the first merge that asked for its document (ReturnDocument)
	// on, so docs may be shorter than applied (nil: none asked).
	docs []domain.Document
	dups []item
	// base is the record's mark the fold started from.
	base knownMark
	// overtakes: failed queued mutations of the record whose position the
	// write passes while the mark it read had not (see overtakeGuard).
	overtakes []item
	// last is the record's state after the fold's last merge or guarded
	// put that prepareFolds applied (the next one's input), kept here,
	// where the fold's other state is, rather than in a variable of its
	// own that would escape to the heap on every merge.
	last domain.Document
}

// keepDocument records doc, the state after the merge of it that was just
// appended to f.applied, when it or an earlier merge of the fold asked for
// its document.
func (f *foldWrite) keepDocument(it item, doc domain.Document) {
	if f.docs == nil && !it.m().ReturnDocument {
		return
	}
	for len(f.docs) < len(f.applied)-1 {
		f.docs = append(f.docs, domain.Document{}) // merges before it that did not ask
	}
	f.docs = append(f.docs, doc)
}

// knownMark is a record's applied mark as far as the service knows it: all
// of it (known: read from storage, or computed from one that was), or only
// what the service's own last write added to it (a put that did not read
// the record); the storage checks every marked write against the whole
// mark anyway.
type knownMark struct {
	mark  domain.AppliedMark
	known bool
}

// after returns the mark after a successful write of u (nil: kept) that
// produced rev.
func (b knownMark) after(u *ports.MarkUpdate, rev domain.Revision) knownMark {
	if u == nil {
		if !b.known {
			return knownMark{}
		}
		return b
	}
	return knownMark{mark: b.mark.Advance(u.IDs, rev, u.Position, u.Keep), known: b.known}
}

// prepareFolds reads the folds' records (those with a hint in h start from
// it instead) and runs their merges' profiles. Merges that fail here get
// their result; each fold with at least one merge that succeeded becomes
// one conditional write, returned with the merges it carries.
func (s *Service) prepareFolds(ctx context.Context, folds []unit, h *hintTable) ([]ports.WriteOp, []unit, []*foldWrite) {
	var b *foldBufs
	if len(folds) == 1 {
		if b = folds[0][0].j.takeFold(); b == nil {
			b = new(foldBufs)
		}
	}
	var current []ports.ReadResult
	var known []bool           // whether current[k]'s mark is the whole mark
	var pre [][]foldStep       // per fold: the outcomes of its first merges, run ahead (see prefold)
	var addrs []domain.Address // records to read
	var unread []int           // folds to read: indexes into folds
	if b != nil {
		current, known, addrs, unread = b.current[:], b.known[:], b.addrs[:0], b.unread[:0]
	} else {
		current, known = make([]ports.ReadResult, len(folds)), make([]bool, len(folds))
	}
	for k, u := range folds {
		a := u[0].m().Address
		id := u[0].rid()
		// A guarded unit decides failures of the call from the record's
		// whole mark: it reads it (see overtakeGuard).
		if st, ok := h.get(id); ok && !guardedUnit(u) {
			current[k] = ports.ReadResult{Found: true, Record: domain.Record{Document: st.doc, Revision: st.rev, Mark: st.mark.mark}}
			known[k] = st.mark.known
			if steps := h.takePrefold(id, st.gen, u); steps != nil {
				if pre == nil {
					pre = make([][]foldStep, len(folds))
				}
				pre[k] = steps
			}
			continue
		}
		h.takePrefold(id, 0, nil) // (dropped: the fold reads the record)
		known[k] = true
		addrs = append(addrs, a)
		unread = append(unread, k)
	}
	if len(addrs) > 0 {
		start := time.Now()
		got := s.storage.Read(ctx, addrs)
		s.obs.StorageCall(ports.StorageRead, len(addrs), time.Since(start))
		for n, k := range unread {
			current[k] = got[n]
		}
	}
	var ops []ports.WriteOp
	var owners []unit
	var members []*foldWrite
	var fws []foldWrite
	if b != nil {
		ops, owners, members, fws = b.ops[:0], b.owners[:0], b.members[:0], b.fws[:]
	} else {
		ops, owners, members, fws = make([]ports.WriteOp, 0, len(folds)), make([]unit, 0, len(folds)), make([]*foldWrite, 0, len(folds)), make([]foldWrite, len(folds))
	}
	marks := newMarkAlloc(len(folds))
	var rereads []int // folds to read again (see decideOvertaking, and below: a hinted fold that writes nothing)
	n, marked := 0, false
	for _, u := range folds {
		n += len(u)
		for _, it := range u {
			marked = marked || it.markID() != ""
		}
	}
	// The folds' mark IDs and applied merges, one fold after another, each
	// in one allocation.
	var idBuf []string
	if marked {
		idBuf = make([]string, 0, n)
	}
	var appliedBuf []item
	if b != nil && n <= len(b.applied) {
		appliedBuf = b.applied[:0]
	} else {
		appliedBuf = make([]item, 0, n)
	}
	for k, u := range folds {
		r := &current[k]
		if r.Err != nil {
			for _, it := range u {
				it.fail(opError(it.ref(), fieldAddress, r.Err))
			}
			continue
		}
		var cur *domain.Document
		cond := ports.Condition{Kind: ports.ConditionAbsent}
		if r.Found {
			cur = &r.Record.Document
			cond = ports.Condition{Kind: ports.ConditionRevision, Revision: r.Record.Revision}
		}
		var steps []foldStep
		if pre != nil {
			steps = pre[k]
		}
		if cur != nil && len(steps) == 0 && u[0].merge() { // (a guarded put replaces it)
			// The stored document is checked as every new one is (it may
			// have been written before documents were checked), so that a
			// broken one is blamed, not the intent (the merges that ran
			// ahead started from a document this service wrote).
			if err := domain.CheckDocument(*cur, s.cfg.Limits.MaxNestingDepth); err != nil {
				for _, it := range u {
					it.fail(invalid(it.ref(), fieldAddress, "the record's stored document (content type %q) %v; merges cannot read it, a put can replace it", cur.ContentType, err))
				}
				continue
			}
		}
		f := &fws[k]
		f.base = knownMark{mark: r.Record.Mark, known: known[k]}
		f.applied = appliedBuf[len(appliedBuf):]
		ids := idBuf[len(idBuf):] // mark IDs of the applied merges
		var pos domain.SourcePosition
		var stopped map[*job]string // blockOnFailure jobs with a retryable failure in this fold
		decided := false            // whether the record's mark found a mutation applied or passed
		var here []item             // queued merges that failed for good in this fold (see overtakeGuard)
		for n, it := range u {
			if n < len(steps) { // run ahead (prefoldable: no mark, blocks nothing)
				if st := &steps[n]; st.err != nil {
					it.fail(st.err)
				} else {
					cur = &st.doc
					f.applied = append(f.applied, it)
					f.keepDocument(it, st.doc)
				}
				continue
			}
			if by, ok := stopped[it.j]; ok {
				it.fail(opErrorf(it.ref(), fieldAddress, domain.CodeUnavailable,
					"not attempted: mutation %s before it on the same record failed and must be retried first", by))
				continue
			}
			id := it.markID()
			if id != "" && slices.Contains(ids, id) {
				f.dups = append(f.dups, it)
				continue
			}
			switch cov, e := r.Record.Mark.Check(id, it.pos()); cov {
			case domain.Duplicate:
				it.skip(e.Revision)
				decided = true
				continue
			case domain.Superseded:
				it.supersede()
				decided = true
				continue
			}
			var doc domain.Document
			var err *domain.Error
			if it.merge() {
				doc, err = s.mergeOne(it, cur)
			} else {
				doc, err = guardedPut(it, r)
			}
			if err != nil {
				it.fail(err)
				if it.j.queued && !err.Retryable {
					here = append(here, it)
				}
				if it.j.blockOnFailure && err.Retryable {
					if stopped == nil {
						stopped = make(map[*job]string)
					}
					stopped[it.j] = it.m().ID
				}
				continue
			}
			f.last = doc
			cur = &f.last // (&doc would move doc to the heap: merges hand cur to the profile)
			f.applied = append(f.applied, it)
			f.keepDocument(it, doc)
			if id != "" {
				ids = append(ids, id)
			}
			if p := it.pos(); !p.IsZero() {
				pos = p
			}
		}
		if decided && len(f.applied) == 0 && h != nil && !slices.Contains(unread, k) {
			// The fold started from a hint, whose mark found mutations
			// already applied (or passed), and writes nothing: no write
			// conditional on the hint's revision checks that the hint is
			// still true, and another writer (another server) may have
			// deleted or replaced the record since, its mark with it. A
			// decision without a write comes from a read: read and fold
			// again. (When the fold writes, its conditional write checks
			// the hint, and a conflict folds it again from a read.)
			rereads = append(rereads, k)
			continue
		}
		if here != nil || guardedUnit(u) {
			wpos := pos
			if len(f.applied) == 0 {
				wpos = domain.SourcePosition{} // nothing is written
			}
			var reread bool
			if f.overtakes, reread = decideOvertaking(u, r.Record.Mark, known[k], wpos, here); reread {
				rereads = append(rereads, k)
				continue
			}
			if len(f.overtakes) > 0 && fenced(ctx, f) {
				continue // not written: see fenced
			}
		}
		appliedBuf = appliedBuf[:len(appliedBuf)+len(f.applied)]
		if len(f.applied) == 0 { // (then there are no repeats either)
			continue
		}
		op := ports.WriteOp{Kind: ports.WritePut, Address: u[0].m().Address, Document: *cur, Condition: cond, HandOver: true}
		if len(ids) > 0 || !pos.IsZero() {
			idBuf = idBuf[:len(idBuf)+len(ids)]
			op.Mark = marks.update()
			op.Mark.IDs, op.Mark.Position, op.Mark.Keep = ids[:len(ids):len(ids)], pos, s.cfg.IdempotencyRing
			if r.Found && known[k] {
				op.Mark.Base = &f.base.mark
			}
		}
		ops = append(ops, op)
		owners = append(owners, u)
		members = append(members, f)
	}
	if rereads != nil {
		// Folds that started from a hint whose mark is not wholly known
		// and would overtake a failed merge: read and fold again.
		again := make([]unit, len(rereads))
		for n, k := range rereads {
			again[n] = folds[k]
		}
		mops, mowners, mmembers := s.prepareFolds(ctx, again, nil)
		ops, owners, members = append(ops, mops...), append(owners, mowners...), append(members, mmembers...)
	}
	return ops, owners, members
}

// fenced asks the queue consumer, before a write that would overtake
// failed mutations (f.overtakes), whether it may have lost their
// partitions (ports.FenceCheck). If so, the write is not made: its
// mutations end CodeCanceled, for the partition's owner to apply, and
// nothing is overtaken (a fenced worker withholds the failures' dead
// letters; the owner meets them again). It reports whether the write is
// dropped.
func fenced(ctx context.Context, f *foldWrite) bool {
	check := ports.FenceCheckOf(ctx)
	if check == nil {
		return false
	}
	err := check(ctx)
	if err == nil {
		return false
	}
	for _, it := range f.applied {
		it.fail(opErrorf(it.ref(), fieldAddress, domain.CodeCanceled, "not written: %v", err))
	}
	for _, it := range f.dups {
		it.fail(opErrorf(it.ref(), fieldAddress, domain.CodeCanceled, "not written: %v", err))
	}
	f.overtakes = nil
	return true
}

// guardedPut returns the document of a put written as a fold (see
// overtakeGuard), or its failure when its own condition does not hold for
// the record read, r: the error the storage answers such a write.
func guardedPut(it item, r *ports.ReadResult) (domain.Document, *domain.Error) {
	m := it.m()
	var e *domain.Error
	switch c := putCondition(m); {
	case c.Kind == ports.ConditionRevision && !r.Found:
		e = domain.Errorf(domain.CodeNotFound, "record %s does not exist (expected revision %s)", m.Address, c.Revision)
	case c.Kind == ports.ConditionRevision && r.Record.Revision != c.Revision:
		e = domain.Errorf(domain.CodeRevisionMismatch, "record %s has revision %s, expected %s", m.Address, r.Record.Revision, c.Revision)
	case c.Kind == ports.ConditionAbsent && r.Found:
		e = domain.Errorf(domain.CodeAlreadyExists, "record %s already exists", m.Address)
	case c.Kind == ports.ConditionExists && !r.Found:
		e = domain.Errorf(domain.CodeNotFound, "record %s does not exist", m.Address)
	default:
		return m.Document, nil
	}
	res := writeResult(it.ref(), m, ports.WriteResult{Err: e}, it.markID() != "")
	return domain.Document{}, res.Err
}

// foldBufs holds the slices of prepareFolds for one fold of one merge
// (every merge of a single-operation request) in one allocation instead of
// eight.
type foldBufs struct {
	current [1]ports.ReadResult
	known   [1]bool
	addrs   [1]domain.Address
	unread  [1]int
	ops     [1]ports.WriteOp
	owners  [1]unit
	members [1]*foldWrite
	fws     [1]foldWrite
	applied [1]item
}

// mergeOne runs the profile of one merge on cur (nil: no record) within
// the merge's time budget and checks its result.
func (s *Service) mergeOne(it item, cur *domain.Document) (domain.Document, *domain.Error) {
	m := it.m()
	ref := it.ref()
	p := s.profiles[m.Merge.Profile]
	if cur != nil && !s.accepts(p, cur.ContentType) {
		return domain.Document{}, invalid(ref, fieldAddress, "the record holds a document of content type %q, which merge profile %q cannot merge into (it accepts %s)",
			cur.ContentType, p.Name(), strings.Join(p.ContentTypes(), ", "))
	}
	doc, err := s.runProfile(it.j.ctx, ref, p, ports.MergeInput{Address: m.Address, Current: cur, Intent: m.Merge.Intent, Accept: s.storageContentTypes(m.Address)})
	if err != nil {
		return domain.Document{}, err
	}
	if err := s.checkMergeResult(ref, p, m, doc); err != nil {
		return domain.Document{}, err
	}
	return doc, nil
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
	mctx := newBudget(ctx, s.cfg.Merge.Timeout)
	defer mctx.release()
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
		field := fieldIntent
		if aboutCurrent(e.Error()) {
			field = fieldAddress // the stored document, not the intent
		}
		return domain.Document{}, opError(ref, field, e)
	}
	return doc, nil
}

// aboutCurrent reports whether a merge profile's error is about the
// record's current document rather than the intent: its message names the
// input it is about first ("current document: …", possibly after the
// profile's name), as ports.MergeProfile asks.
func aboutCurrent(msg string) bool {
	if strings.HasPrefix(msg, "current document: ") {
		return true
	}
	_, rest, ok := strings.Cut(msg, ": ")
	return ok && strings.HasPrefix(rest, "current document: ")
}

func (s *Service) checkMergeResult(ref opRef, p ports.MergeProfile, m *domain.Mutation, doc domain.Document) *domain.Error {
	if doc.ContentType == "" || len(doc.Data) > s.cfg.Limits.MaxDocumentBytes {
		return invalid(ref, fieldIntent, "merge profile %q produced a document of %d bytes with content type %q; the limit is %d bytes and a content type is required",
			p.Name(), len(doc.Data), doc.ContentType, s.cfg.Limits.MaxDocumentBytes)
	}
	if err := domain.CheckDocument(doc, s.cfg.Limits.MaxNestingDepth); err != nil {
		return invalid(ref, fieldIntent, "merge profile %q produced a document of content type %q that %v", p.Name(), doc.ContentType, err)
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

// marked says whether the write recorded the mutation's ID in the
// record's applied mark: then sending it again is safe whatever it is
// (the retry finds the ID and is not applied twice), so an unknown
// outcome is retryable.
func writeResult(ref opRef, m *domain.Mutation, r ports.WriteResult, marked bool) WriteResult {
	if r.Err != nil && domain.CodeOf(r.Err) == domain.CodeAlreadyApplied {
		// The mutation's ID is in the record's mark: the original
		// outcome, with the revision its write produced.
		out := WriteResult{Status: StatusApplied, Revision: r.Revision, Skipped: true}
		if m.Kind == domain.MutationDelete {
			out.Revision = ""
		}
		return out
	}
	if r.Err != nil && domain.CodeOf(r.Err) == domain.CodeSuperseded {
		// The record's mark passed the queued mutation's log position
		// when it was written: handled before, skipped.
		return superseded()
	}
	if r.Err != nil {
		e := domain.AsError(r.Err)
		if retry := marked || idempotent(m); e.Code == domain.CodeOutcomeUnknown && e.Retryable != retry {
			c := *e
			c.Retryable = retry
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
