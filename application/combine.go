package application

import (
	"context"
	"errors"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

var shardSeed = maphash.MakeSeed()

// shardOf returns the combiner shard that every one of ops operations
// falls in (at returns the store and record of operation k), or -1 when
// they fall in several. Each store has its own group of Config.Batch.Shards
// shards, so that batches never mix stores.
func (s *Service) shardOf(ops int, at func(k int) (string, domain.RecordID)) int {
	return s.shardBy(ops, func(k int) (string, uint64) {
		store, id := at(k)
		return store, maphash.String(shardSeed, string(id))
	})
}

// shardOfAddresses is shardOf for the records of addrs, whose IDs it
// encodes on the stack (when they are short) to hash them instead of
// allocating them.
func (s *Service) shardOfAddresses(addrs []domain.Address) int {
	var buf [96]byte
	return s.shardBy(len(addrs), func(k int) (string, uint64) {
		return addrs[k].Store, maphash.Bytes(shardSeed, domain.AppendAddress(buf[:0], addrs[k])) // = maphash.String of its ID
	})
}

// shardBy is shardOf with at returning the store of operation k and the
// hash of its record ID.
func (s *Service) shardBy(ops int, at func(k int) (string, uint64)) int {
	if len(s.writes) == 1 {
		return 0
	}
	per := uint64(s.cfg.Batch.Shards)
	shard := -1
	for k := 0; k < ops; k++ {
		store, hash := at(k)
		h := s.shardGroup(store)
		if per > 1 {
			h += int(hash % per)
		}
		switch {
		case shard < 0:
			shard = h
		case h != shard:
			return -1
		}
	}
	return shard
}

// combiner gives natural batching (the service has one per shard of
// records; callers whose records span shards are not batched): while one batch of work is at storage,
// new callers queue; when it returns, the queued callers go to storage
// together as the next batch, in arrival order, up to max operations. There
// is no timer: a caller that finds nothing in flight runs at once, alone, so
// at low load nothing waits, and under load batches form by themselves.
//
// One batch runs at a time, so the batches of one combiner are applied in
// arrival order: a caller's work starts only after the work of every caller
// that queued before it finished.
//
// The caller that finds nothing in flight leads: it runs the batch in its
// own goroutine (a batch of several callers whose leader may leave it at
// its deadline runs in a goroutine of its own: see lead). When a batch
// ends, the leader wakes the callers it carried and hands the lead to the
// oldest queued caller, which runs the next batch (so no caller runs more
// than its own batch).
type combiner[T any] struct {
	max  int
	size func(T) int
	run  func(ctx context.Context, batch []*waiter[T]) // ctx: see lead

	mu    sync.Mutex
	busy  bool
	queue []*waiter[T]

	// hints (write combiners) are the last written states of the records
	// of the shard; they are dropped when the combiner goes idle.
	hints hintTable

	// queued, when set, is called with a caller's item, under mu, right
	// after the caller queued behind a batch in flight; the function it
	// returns (if any) runs once mu is released, before the caller waits.
	// So the queued hooks begin in queue order (write combiners: the
	// service's prefold).
	queued func(T) func()

	// carry, when set, is called with a caller's item, under mu, when the
	// batch of another caller takes it; it returns whether the caller may
	// leave that batch when its context ends (see do) instead of waiting
	// for the batch to end. It prepares the item for that: from then on
	// the batch must not touch anything the caller reads after leaving.
	carry func(T) bool

	// onQueued, when set (tests), is called after a caller queued.
	onQueued func()
}

// errLeftBatch is do's answer to a caller that left the batch carrying
// its item when its context ended (see combiner.carry): the batch may
// still run the item, or have run it.
var errLeftBatch = errors.New("left the batch carrying it, which was still at storage")

// waiter is one caller's work in a combiner. Callers keep it in their
// item's allocation (see do).
type waiter[T any] struct {
	item  T
	ctx   context.Context
	state waiterState
	wake  chan struct{}
	// batch is the context of the batch that carries the waiter (set
	// with waiterTaken when the batch has several callers).
	batch *batchCtx
	// leave: the waiter may leave the batch that carries it (see carry).
	leave bool
	// alone is the batch of a leader that carries no other caller.
	alone [1]*waiter[T]
}

type waiterState uint8

const (
	waiterQueued waiterState = iota
	waiterTaken              // carried by another leader's batch
	waiterLead               // woken to lead the next batch
)

// do runs w.item, alone or in a batch with the items of concurrent
// callers, and returns when it ran. It returns w.ctx's error, without
// running the item, when w.ctx ended while it was still queued (a queued
// caller whose context ended is never taken into a batch). When w.ctx
// ends while a batch of several callers carries the item (another
// caller's, or one w leads), it returns errLeftBatch at once if carry
// allowed that, and otherwise when the batch ends. w is fresh: only its item and ctx are set (callers keep it
// in their item's allocation instead of allocating one per call).
func (c *combiner[T]) do(w *waiter[T]) error {
	ctx, item := w.ctx, w.item
	c.mu.Lock()
	if !c.busy {
		c.busy = true
		c.mu.Unlock()
		return c.lead(w)
	}
	w.wake = make(chan struct{})
	c.queue = append(c.queue, w)
	var then func()
	if c.queued != nil {
		then = c.queued(item)
	}
	c.mu.Unlock()
	if then != nil {
		then()
	}
	if c.onQueued != nil {
		c.onQueued()
	}
	select {
	case <-w.wake:
	case <-ctx.Done():
		c.mu.Lock()
		if w.state == waiterQueued {
			for k, q := range c.queue {
				if q == w {
					c.queue = append(c.queue[:k], c.queue[k+1:]...)
					break
				}
			}
			c.mu.Unlock()
			return ctx.Err()
		}
		b, leave := w.batch, w.leave
		c.mu.Unlock()
		if b != nil {
			b.leave()
		}
		if leave {
			select {
			case <-w.wake: // the batch ended meanwhile: its results stand
			default:
				return errLeftBatch
			}
		}
		<-w.wake
	}
	if w.state == waiterLead {
		return c.lead(w)
	}
	return nil
}

// lead runs one batch: w and the queued callers after it, up to max
// operations in all (w always runs, even when it alone exceeds max).
//
// A batch of w alone runs in w's goroutine, with w's context: nothing is
// allocated or started for it. A batch of several callers runs with a
// context of its own (batchCtx); when carry lets w leave it (a synchronous
// caller, like the callers it carries), it runs in a goroutine of its own
// while w waits for it or for w's context to end, whichever comes first:
// at that, lead returns errLeftBatch and the batch goes on for the others
// (so the leader, too, leaves at its deadline). Otherwise (a worker's
// batch, which must know every outcome) it runs in w's goroutine to the
// end.
func (c *combiner[T]) lead(w *waiter[T]) error {
	w.alone[0] = w
	batch := w.alone[:1:1] // (more callers: append moves them)
	c.mu.Lock()
	n := c.size(w.item)
	k := 0
	for ; k < len(c.queue); k++ {
		q := c.queue[k]
		if q.ctx.Err() != nil {
			// Its context ended while it waited: it leaves (do), and
			// nothing of it runs. Dropped from the queue with the taken.
			continue
		}
		sz := c.size(q.item)
		if n+sz > c.max {
			break
		}
		n += sz
		q.state = waiterTaken
		if c.carry != nil {
			q.leave = c.carry(q.item)
		}
		batch = append(batch, q)
	}
	c.queue = c.queue[k:]
	if len(batch) == 1 {
		c.mu.Unlock()
		defer c.finish(batch)
		c.run(w.ctx, batch)
		return nil
	}
	// (A leader whose context cannot end never leaves: no goroutine.)
	leave := c.carry != nil && w.ctx.Done() != nil && c.carry(w.item)
	bc := newBatchCtx(w.ctx, len(batch))
	for _, q := range batch[1:] {
		q.batch = bc
	}
	c.mu.Unlock()
	stop := context.AfterFunc(w.ctx, bc.leave)
	if !leave {
		c.runBatch(bc, batch, stop, nil)
		return nil
	}
	done := make(chan struct{})
	go c.runBatch(bc, batch, stop, done)
	select {
	case <-done:
	case <-w.ctx.Done():
		select {
		case <-done: // the batch ended meanwhile: its results stand
		default:
			return errLeftBatch
		}
	}
	return nil
}

// runBatch runs a batch of several callers with its context bc, then
// hands the lead on (finish); stop ends the watch of the leader's context
// (see lead). done, when not nil, is closed at the end.
func (c *combiner[T]) runBatch(bc *batchCtx, batch []*waiter[T], stop func() bool, done chan struct{}) {
	if done != nil {
		defer close(done)
	}
	defer c.finish(batch)
	defer func() {
		stop()
		bc.cancel()
	}()
	c.run(bc, batch)
}

// finish ends a batch: it hands the lead to the oldest queued caller (or
// marks the combiner idle), and wakes the callers the batch carried
// (batch[1:]).
func (c *combiner[T]) finish(batch []*waiter[T]) {
	c.mu.Lock()
	for len(c.queue) > 0 && c.queue[0].ctx.Err() != nil {
		// A caller whose context ended leaves (do) instead of
		// leading: dropped, so that the lead goes to one that waits.
		c.queue[0] = nil
		c.queue = c.queue[1:]
	}
	handed := len(c.queue) > 0
	if handed {
		next := c.queue[0]
		c.queue = c.queue[1:]
		next.state = waiterLead
		close(next.wake)
	} else {
		c.busy = false
		c.hints.reset()
	}
	c.mu.Unlock()
	if handed {
		// The new leader was readied last, so it runs next on this
		// processor: yield to it, so that the next batch goes to
		// storage before this caller and the ones it carried send
		// their responses (otherwise it waits behind them, about a
		// quarter of a 1 ms round trip on a busy server). Those are
		// woken after that (2-3 % more merges/s on a hot record than
		// waking them first, in alternating runs).
		runtime.Gosched()
	}
	for _, b := range batch[1:] {
		close(b.wake)
	}
}

// batchCtx is the context of the storage calls of a batch of several
// callers: it keeps the values of the first (the leader) and ends when
// every caller's context ended, so that the batch is not cut short for the
// callers still waiting for it. The carried callers watch their own
// contexts while they wait (see do) and leave; only the leader's needs a
// watcher (context.AfterFunc), so a batch costs one registration with a
// caller's context, not one per caller.
type batchCtx struct {
	context.Context
	cancel context.CancelFunc
	left   atomic.Int64 // callers whose contexts have not ended
}

func newBatchCtx(leader context.Context, callers int) *batchCtx {
	ctx, cancel := context.WithCancel(context.WithoutCancel(leader))
	b := &batchCtx{Context: ctx, cancel: cancel}
	b.left.Store(int64(callers))
	return b
}

// leave records that one caller's context ended.
func (b *batchCtx) leave() {
	if b.left.Add(-1) == 0 {
		b.cancel()
	}
}

// recordState is a record's state right after a successful put: the
// document written and the revision storage returned.
type recordState struct {
	doc domain.Document
	rev domain.Revision
	// mark is the record's applied mark after that put, as far as the
	// service knows it (see knownMark).
	mark knownMark
	// gen names the put among the shard's writes (hintTable.pend); 0 for
	// none.
	gen uint64
}

// hintTable keeps, for the records of one write shard, the state the
// service itself last wrote: by the storage port's contract a read of the
// record returns exactly that document (content type and bytes) with that
// revision (and the applied mark, as far as the hint knows it) until
// someone else writes it. A fold of merges of a record with
// a hint starts from it instead of reading the record (see prepareFolds);
// its write stays conditional on the hint's revision, so a hint made stale
// by another writer (another process, a caller outside the shard's
// batches) costs one conflict, after which the hint is dropped and the
// fold re-reads the record as without hints. Client reads never use hints.
//
// Bounds: a batch sees the hints of its own earlier waves and of the batch
// before it (begin rotates them), so the table holds at most the records
// of two batches; and it is emptied whenever the combiner goes idle (no
// caller waiting), so at low load no hint outlives its batch.
//
// The table is safe for concurrent use: the shard's batches (one at a
// time) set and use hints; callers outside them only drop hints of records
// they write.
type hintTable struct {
	mu        sync.Mutex
	cur, prev map[domain.RecordID]recordState
	// pending are the states the shard's batch at storage is writing
	// (revision not yet known), by record; gen numbers them.
	pending map[domain.RecordID]recordState
	gen     uint64

	// pre are the prefolds of the shard's queued merges (see prefold),
	// by record; prefolding is set while one runs. preMu guards them
	// (taken before mu, never held while a profile runs).
	preMu      sync.Mutex
	pre        map[domain.RecordID]*prefold
	prefolding bool
	batches    uint64 // batches begun (see begin)
}

// hintsMax bounds the hints a batch keeps (a larger batch keeps no more;
// the rest are read as without hints).
const hintsMax = 4096

// begin starts a batch: the hints of the batch before it become the
// older generation, those of the batch before that are dropped, and so are
// the prefolds made before the batch before it started (a prefold is for
// the next batch; one that batch did not take, because its caller left or
// its record was not in it, would otherwise keep its caller's documents
// until the shard goes idle).
func (h *hintTable) begin() {
	if h == nil {
		return
	}
	h.preMu.Lock()
	h.batches++
	for id, pf := range h.pre {
		if pf.batches+1 < h.batches {
			delete(h.pre, id)
		}
	}
	h.preMu.Unlock()
	h.mu.Lock()
	h.prev, h.cur = h.cur, emptied(h.prev)
	h.mu.Unlock()
}

// reuseMax bounds the maps the table empties and keeps for reuse (larger
// ones are left to the collector rather than kept at their size).
const reuseMax = 64

// emptied returns m emptied when it is small, so that the next batch
// reuses it instead of allocating a map (at low load, every single
// operation would); nil otherwise.
func emptied[M ~map[K]V, K comparable, V any](m M) M {
	if len(m) > reuseMax {
		return nil
	}
	clear(m)
	return m
}

// get returns the record's hint.
func (h *hintTable) get(id domain.RecordID) (recordState, bool) {
	if h == nil {
		return recordState{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hint(id)
}

// hint is get with mu held.
func (h *hintTable) hint(id domain.RecordID) (recordState, bool) {
	if st, ok := h.cur[id]; ok {
		return st, true
	}
	st, ok := h.prev[id]
	return st, ok
}

// pend records that the puts among ops (on the records rids) are going to
// storage and sets, per op, gens[k] to the generation that names the state
// it writes (0 for others; pass it to set).
func (h *hintTable) pend(ops []ports.WriteOp, rids []domain.RecordID, gens []uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range ops {
		if ops[k].Kind != ports.WritePut {
			gens[k] = 0
			continue
		}
		if h.pending == nil {
			h.pending = make(map[domain.RecordID]recordState)
		}
		h.gen++
		h.pending[rids[k]] = recordState{doc: ops[k].Document, gen: h.gen}
		gens[k] = h.gen
	}
}

// base returns the state a merge queued now would start from if nothing
// else came before it: the state the batch at storage is writing, else
// the record's hint.
func (h *hintTable) base(id domain.RecordID) (recordState, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if st, ok := h.pending[id]; ok {
		return st, true
	}
	return h.hint(id)
}

// set records that the service wrote st.doc to the record, getting
// st.rev, leaving the mark st.mark.
func (h *hintTable) set(id domain.RecordID, st recordState) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.pending, id)
	if h.cur == nil {
		h.cur = make(map[domain.RecordID]recordState)
	}
	if _, ok := h.cur[id]; !ok && len(h.cur) >= hintsMax {
		delete(h.prev, id)
		return
	}
	h.cur[id] = st
}

// drop forgets the record's hint.
func (h *hintTable) drop(id domain.RecordID) {
	if h == nil {
		return
	}
	h.mu.Lock()
	delete(h.cur, id)
	delete(h.prev, id)
	delete(h.pending, id)
	h.mu.Unlock()
}

// reset forgets every hint and prefold.
func (h *hintTable) reset() {
	h.preMu.Lock()
	h.pre = emptied(h.pre)
	h.preMu.Unlock()
	h.mu.Lock()
	h.cur, h.prev, h.pending = emptied(h.cur), emptied(h.prev), emptied(h.pending)
	h.mu.Unlock()
}

// len returns the number of records with a hint (tests).
func (h *hintTable) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.cur)
	for id := range h.prev {
		if _, ok := h.cur[id]; !ok {
			n++
		}
	}
	return n
}
