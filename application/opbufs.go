package application

import (
	"sync"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// maxPooledOps bounds the operations of the per-request and per-wave
// buffers kept in this file's pools: larger ones are left to the
// collector, so that a pool never keeps more than that per buffer.
const maxPooledOps = 1024

// opBufs holds the per-operation state of one Write or Delete request of
// several mutations except its results (which go back to the caller):
// the working copy of the mutations, the valid indexes, the verdicts, the
// outcomes and errors reported, and the record IDs (job.ids). A 500-put
// request's took about 220 KB, which the collector paid for.
//
// Ownership: mutate gets them (mutateSlices) and is their only owner
// while it runs; the job it executes uses them, alone or in a batch of
// the write combiner. They go back to the pool (release) when mutate
// returns, after it reported the outcomes, unless the caller left the
// batch carrying its job at its deadline (execute reports that): the
// batch may still read the mutations and IDs, so they are then left to
// the collector, never reused. A caller that returns otherwise is done
// with them: a batch that took its job ended before waking it (combiner
// finish), and a job that left the queue was never taken (a prefold of
// it keeps the job's pointer, which is not pooled, and compares it only).
// The results returned hold nothing of them (strings are immutable;
// documents returned are copies of the document values).
type opBufs struct {
	work     []domain.Mutation
	valid    []int
	datasets []domain.DatasetRef
	admitted []bool
	outcomes []ports.OperationOutcome
	errs     []*domain.Error
	ids      []domain.RecordID
}

var opBufPool sync.Pool // *opBufs

// released, when set (tests), is called with buffers that release gives
// back to the pool, after they were emptied.
var released func(*opBufs)

// getOpBufs returns buffers for n operations: work, datasets, admitted,
// outcomes, errs and ids of length n (all zero but work, which the caller
// overwrites), valid empty with room for n.
func getOpBufs(n int) *opBufs {
	b, _ := opBufPool.Get().(*opBufs)
	if b == nil || cap(b.work) < n {
		c := n
		b = &opBufs{
			work:     make([]domain.Mutation, c),
			valid:    make([]int, 0, c),
			datasets: make([]domain.DatasetRef, c),
			admitted: make([]bool, c),
			outcomes: make([]ports.OperationOutcome, c),
			errs:     make([]*domain.Error, c),
			ids:      make([]domain.RecordID, c),
		}
	}
	b.work, b.valid = b.work[:n], b.valid[:0]
	b.datasets, b.admitted, b.outcomes, b.errs, b.ids = b.datasets[:n], b.admitted[:n], b.outcomes[:n], b.errs[:n], b.ids[:n]
	return b
}

// release empties b (so that the pool keeps no request's documents,
// names or errors alive) and gives it to the pool if it is not larger
// than maxPooledOps. Only b's owner calls it, once, when nothing uses b
// any more (see opBufs). A nil b is no buffers.
func (b *opBufs) release() {
	if b == nil || cap(b.work) > maxPooledOps {
		return
	}
	clear(b.work[:cap(b.work)])
	clear(b.datasets[:cap(b.datasets)])
	clear(b.admitted[:cap(b.admitted)])
	clear(b.outcomes[:cap(b.outcomes)])
	clear(b.errs[:cap(b.errs)])
	clear(b.ids[:cap(b.ids)])
	if released != nil {
		released(b)
	}
	opBufPool.Put(b)
}

// oneBufs is opBufs for a request of one mutation (its record ID is in
// its job: job.oneID), with the buffers of the first wave that applies it
// and, for a merge, of the first fold that carries it (job.wave, job.fold;
// see takeWave): a put's were 1.1 KB of its 1.2 KB allocation in the
// application. They have opBufs' ownership: mutate owns them, and gives
// them back when it returns unless its caller left the batch carrying its
// job (which may still use them, the wave's and fold's buffers too).
type oneBufs struct {
	work     [1]domain.Mutation
	valid    [1]int
	datasets [1]domain.DatasetRef
	admitted [1]bool
	outcomes [1]ports.OperationOutcome
	errs     [1]*domain.Error
	wave     waveBufs
	fold     foldBufs
}

var oneBufPool onePool[oneBufs]

// onePool is a pool of a request of one operation's buffers (oneBufs,
// oneReadBufs).
type onePool[T any] struct {
	p sync.Pool
	// released, when set (tests), is called with the buffers put gives
	// back to the pool, after they were emptied.
	released func(*T)
}

func (p *onePool[T]) get() *T {
	if b, ok := p.p.Get().(*T); ok {
		return b
	}
	return new(T)
}

// put empties b and pools it; see opBufs for when. A nil b is no buffers.
func (p *onePool[T]) put(b *T) {
	if b == nil {
		return
	}
	var zero T
	*b = zero
	if p.released != nil {
		p.released(b)
	}
	p.p.Put(b)
}

// The scratch buffers below live within one call (recordIDs, applyWaves,
// applyWave) of the goroutine that runs it: each is released when that
// call returns, when nothing holds any of it (the units, ops and IDs
// built in them are used by the call alone; the storage does not keep
// the ops slice, and hints and results copy what they keep). Each is
// emptied before it is pooled, so that a pool keeps no request's
// documents, addresses or jobs alive.

// idScratch holds recordIDs' encoding buffer and ID ends.
type idScratch struct {
	buf  []byte
	ends []int
}

// maxPooledIDBytes bounds the encoding buffer kept in idScratchPool.
const maxPooledIDBytes = 64 << 10

var idScratchPool sync.Pool // *idScratch

// getIDScratch returns scratch with room for the ends of n IDs.
func getIDScratch(n int) *idScratch {
	sc, _ := idScratchPool.Get().(*idScratch)
	if sc == nil {
		sc = new(idScratch)
	}
	if cap(sc.ends) < n {
		sc.ends = make([]int, n)
		if cap(sc.buf) == 0 {
			sc.buf = make([]byte, 0, 32*n)
		}
	}
	return sc
}

func (sc *idScratch) release() {
	if cap(sc.buf) > maxPooledIDBytes || cap(sc.ends) > maxPooledOps {
		return
	}
	sc.buf = sc.buf[:0] // (bytes only: nothing to keep alive)
	idScratchPool.Put(sc)
}

// wavesScratch holds applyWaves' record table, the units' first items
// and the first wave's units.
type wavesScratch struct {
	records map[domain.RecordID]wavesSeq
	firsts  []item
	first   []unit
	n       int // the capacity of firsts and first
}

// getWavesScratch returns an empty record table and empty firsts and
// first with room for n.
func getWavesScratch(n int) *wavesScratch {
	sc, _ := wavesScratchPool.Get().(*wavesScratch)
	if sc == nil || sc.n < n {
		sc = &wavesScratch{records: make(map[domain.RecordID]wavesSeq, n), firsts: make([]item, 0, n), first: make([]unit, 0, n), n: n}
	}
	return sc
}

// wavesSeq is applyWaves' record of one record's units so far.
type wavesSeq struct {
	n    int // units so far
	last int // index of the record's last unit in its wave, -1 for none
}

var wavesScratchPool sync.Pool // *wavesScratch

func (sc *wavesScratch) release() {
	if sc.n > maxPooledOps {
		return
	}
	clear(sc.records)
	clear(sc.firsts[:sc.n])
	clear(sc.first[:sc.n])
	sc.firsts, sc.first = sc.firsts[:0], sc.first[:0]
	wavesScratchPool.Put(sc)
}

// waveSlices holds applyWave's per-op slices for a wave of several units.
type waveSlices struct {
	ops     []ports.WriteOp
	owners  []unit
	bases   []knownMark
	written []*foldWrite
	rids    []domain.RecordID
	gens    []uint64
}

var waveSlicesPool sync.Pool // *waveSlices

// getWaveSlices returns slices with room for the ops of n units.
func getWaveSlices(n int) *waveSlices {
	p, _ := waveSlicesPool.Get().(*waveSlices)
	if p == nil || cap(p.ops) < n {
		p = &waveSlices{ops: make([]ports.WriteOp, 0, n), owners: make([]unit, 0, n), bases: make([]knownMark, 0, n),
			written: make([]*foldWrite, 0, n), rids: make([]domain.RecordID, n), gens: make([]uint64, n)}
	}
	return p
}

func (p *waveSlices) release() {
	if cap(p.ops) > maxPooledOps {
		return
	}
	clear(p.ops[:cap(p.ops)])
	clear(p.owners[:cap(p.owners)])
	clear(p.bases[:cap(p.bases)])
	clear(p.written[:cap(p.written)])
	clear(p.rids[:cap(p.rids)])
	waveSlicesPool.Put(p)
}

// readBufs is opBufs for a Read request of several reads: its verdicts,
// outcomes and errors, and its valid addresses and their positions. The
// same ownership holds: Read releases them when it returns, unless its
// caller left the read batch carrying its reads (readStorage reports
// that), which may still read the addresses (runReads copies them when
// it starts); then they are left to the collector.
type readBufs struct {
	datasets []domain.DatasetRef
	admitted []bool
	outcomes []ports.OperationOutcome
	errs     []*domain.Error
	valid    []domain.Address
	pos      []int
}

var readBufPool sync.Pool // *readBufs

// getReadBufs returns buffers for n reads: datasets, admitted, outcomes
// and errs zero, of length n; valid and pos empty, with room for n.
func getReadBufs(n int) *readBufs {
	b, _ := readBufPool.Get().(*readBufs)
	if b == nil || cap(b.valid) < n {
		b = &readBufs{datasets: make([]domain.DatasetRef, n), admitted: make([]bool, n), outcomes: make([]ports.OperationOutcome, n),
			errs: make([]*domain.Error, n), valid: make([]domain.Address, 0, n), pos: make([]int, 0, n)}
	}
	b.datasets, b.admitted, b.outcomes, b.errs = b.datasets[:n], b.admitted[:n], b.outcomes[:n], b.errs[:n]
	b.valid, b.pos = b.valid[:0], b.pos[:0]
	return b
}

// release empties b and pools it (not above maxPooledOps); see opBufs.
// A nil b is no buffers.
func (b *readBufs) release() {
	if b == nil || cap(b.valid) > maxPooledOps {
		return
	}
	clear(b.datasets[:cap(b.datasets)])
	clear(b.admitted[:cap(b.admitted)])
	clear(b.outcomes[:cap(b.outcomes)])
	clear(b.errs[:cap(b.errs)])
	clear(b.valid[:cap(b.valid)])
	if releasedReads != nil {
		releasedReads(b)
	}
	readBufPool.Put(b)
}

// releasedReads is released for readBufs (tests).
var releasedReads func(*readBufs)

// oneReadBufs is readBufs for a request of one read, with its job (a
// read job is never kept past its batch, unlike a write's): pooled, with
// readBufs' ownership.
type oneReadBufs struct {
	datasets [1]domain.DatasetRef
	admitted [1]bool
	outcomes [1]ports.OperationOutcome
	errs     [1]*domain.Error
	valid    [1]domain.Address
	pos      [1]int
	job      readJob
}

var oneReadBufPool onePool[oneReadBufs]

// The results of a request of several operations ([]ReadResult of Read,
// []WriteResult of Write and Delete) go back to the caller, which may give
// them back once it no longer reads them (ReleaseReadResults,
// ReleaseWriteResults): a 500-operation batch's took 66 KB (reads) and
// 32 KB (writes), which the collector paid for. Only the slice of result
// structs is reused: it is emptied before it is pooled, so that a pool
// keeps no request's documents, revisions or errors alive, and what the
// caller copied out of it (documents' bytes, strings, errors) is never
// written again.
//
// Ownership: nothing but the caller holds a results slice once the call
// returned. Read alone writes its results (the read batch writes each
// job's out, which Read copies). A Write's or Delete's results are
// written by mutate, by submit (within the call), and by the write batch
// carrying its job until the batch wakes the caller; a caller that may
// leave the batch at its deadline has the batch write a slice of the
// job's own instead (carryJob), and execute copies it into the caller's
// only when the caller stayed. As a second guard, mutate never returns a
// slice the batch was given when its caller left: it returns a copy (see
// mutate), so that a released slice is one no batch ever held.

// resultPool pools results slices of several operations, up to
// maxPooledOps.
type resultPool[R any] struct {
	p sync.Pool // *[]R, emptied
	// released, when set (tests), is called with each slice pooled, after
	// it was emptied.
	released func([]R)
}

var (
	readResults  resultPool[ReadResult]
	writeResults resultPool[WriteResult]
)

// get returns n zero results, in a pooled slice when one has room.
func (p *resultPool[R]) get(n int) []R {
	if b, ok := p.p.Get().(*[]R); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]R, n)
}

// put empties r and pools it: only slices of several results (a single
// operation's result is an allocation of its own, see oneMutation and
// readSlices) and of at most maxPooledOps.
func (p *resultPool[R]) put(r []R) {
	if cap(r) <= 1 || cap(r) > maxPooledOps {
		return
	}
	// (A variable of its own, declared here: the pool takes its address,
	// which moves it to the heap where it is declared; had it been r, every
	// call would allocate, single operations' too.)
	b := r[:cap(r)]
	clear(b)
	if p.released != nil {
		p.released(b)
	}
	p.p.Put(&b)
}

// ReleaseReadResults gives back the results of a Read, which the caller
// may do once it no longer reads them (nor anything else does): the slice
// may then be reused for another request's results. Calling it is
// optional (results not given back are left to the collector); a slice is
// given back once at most, and only one Read returned. What the caller
// copied out of the results (documents' bytes, revisions, errors) stays
// valid: only the slice of result structs is reused.
func (s *Service) ReleaseReadResults(results []ReadResult) { readResults.put(results) }

// ReleaseWriteResults is ReleaseReadResults for the results of a Write or
// Delete.
func (s *Service) ReleaseWriteResults(results []WriteResult) { writeResults.put(results) }
