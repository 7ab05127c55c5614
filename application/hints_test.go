package application

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
)

// stepped wraps a storage: every Write call announces itself on entered
// and waits for a token on proceed before it reaches the storage, so that a
// test can queue work behind each batch.
type stepped struct {
	ports.Storage
	entered chan struct{}
	proceed chan struct{}
}

func (s *stepped) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	s.entered <- struct{}{}
	<-s.proceed
	return s.Storage.Write(ctx, ops)
}

// noReadBack is a storage that says it does not read back what it was
// given (see readBackReporter).
type noReadBack struct{ ports.Storage }

func (noReadBack) ReadsBackWrites() bool { return false }

var _ ports.ReadBackReporter = noReadBack{}

// hinted is a service with batching on (one shard) over a stepped storage
// over a counting Delayed over a memory store (mem, which tests write to
// directly to play another writer).
type hinted struct {
	t      *testing.T
	s      *Service
	mem    *memory.Store
	count  *storagetest.Delayed
	st     *stepped
	queued chan struct{}
	wg     sync.WaitGroup
}

func newHinted(t *testing.T, wrap func(ports.Storage) ports.Storage) *hinted {
	t.Helper()
	h := &hinted{t: t, mem: memory.New(), queued: make(chan struct{})}
	h.count = storagetest.NewDelayed(h.mem, 0)
	h.st = &stepped{Storage: h.count, entered: make(chan struct{}), proceed: make(chan struct{})}
	var st ports.Storage = h.st
	if wrap != nil {
		st = wrap(st)
	}
	s := oneShardService(t, st)
	s.writes[0].onQueued = func() { h.queued <- struct{}{} }
	h.s = s
	return h
}

// write starts a Write of m; lead says whether it finds no batch in flight
// (it then reaches storage.Write) or queues behind one.
func (h *hinted) write(m domain.Mutation, lead bool) *WriteResult {
	out := new(WriteResult)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		res, err := h.s.Write(context.Background(), []domain.Mutation{m}, WaitUntilApplied)
		if err != nil {
			h.t.Errorf("write: %v", err)
			return
		}
		*out = res[0]
	}()
	if lead {
		<-h.st.entered
	} else {
		<-h.queued
	}
	return out
}

// next lets the write at storage through and waits until the next batch's
// write arrives.
func (h *hinted) next() {
	h.t.Helper()
	h.st.proceed <- struct{}{}
	select {
	case <-h.st.entered:
	case <-time.After(10 * time.Second): // a failure guard, not synchronisation
		h.t.Fatal("no further storage write arrived")
	}
}

// last lets the write at storage through and waits for every caller.
func (h *hinted) last() {
	h.st.proceed <- struct{}{}
	h.wg.Wait()
}

func (h *hinted) list(k string) string {
	h.t.Helper()
	r := h.mem.Read(context.Background(), []domain.Address{stored(k)})
	var d listDoc
	if !r[0].Found || json.Unmarshal(r[0].Record.Document.Data, &d) != nil {
		h.t.Fatalf("record %s: %+v", k, r[0])
	}
	return strings.Join(d.L, ",")
}

// A fold that follows a write of its record by the service (a put, or
// another fold) in the next batch starts from the written state: it does
// no storage read.
func TestFoldAfterOwnWriteDoesNotRead(t *testing.T) {
	h := newHinted(t, nil)
	p := h.write(listPut("k", "p"), true)
	m1 := h.write(listMerge("k", "a"), false)
	h.next() // the put is written; the fold of m1 is at storage
	m2 := h.write(listMerge("k", "b"), false)
	h.next() // the fold of m2 is at storage
	m3 := h.write(listMerge("k", "c"), false)
	h.next() // the fold of m3 is at storage
	h.last()
	for i, r := range []*WriteResult{p, m1, m2, m3} {
		if r.Status != StatusApplied {
			t.Fatalf("write %d: %+v", i, r)
		}
	}
	if got := h.list("k"); got != "p,a,b,c" {
		t.Fatalf("record holds %q, want p,a,b,c", got)
	}
	if st := h.count.Stats(); st.Reads != 0 || st.Writes != 4 || st.Conflicts != 0 {
		t.Fatalf("storage calls %+v, want 4 writes and no read", st)
	}
	if n := h.s.writes[0].hints.len(); n != 0 {
		t.Fatalf("%d hints are kept after the combiner went idle, want none", n)
	}
}

// A storage that does not read back what it was given gets no hints:
// every fold reads its record.
func TestNoHintsWhenStorageDoesNotReadBackWrites(t *testing.T) {
	h := newHinted(t, func(s ports.Storage) ports.Storage { return noReadBack{s} })
	h.write(listPut("k", "p"), true)
	h.write(listMerge("k", "a"), false)
	h.next()
	h.write(listMerge("k", "b"), false)
	h.next()
	h.last()
	if got := h.list("k"); got != "p,a,b" {
		t.Fatalf("record holds %q, want p,a,b", got)
	}
	if st := h.count.Stats(); st.Reads != 2 || st.Writes != 3 {
		t.Fatalf("storage calls %+v, want a read for each of the 2 folds", st)
	}
}

// Another writer between two folds makes the hint stale: the second fold's
// conditional write conflicts, the fold re-reads the record and applies
// its merge to the other writer's document. Client reads never see hints.
func TestStaleHintConflictsAndRereads(t *testing.T) {
	h := newHinted(t, nil)
	h.write(listPut("k", "p"), true)
	h.write(listMerge("k", "a"), false)
	h.next() // the fold of m1 is at storage
	b := h.write(listMerge("k", "b"), false)
	h.next() // the fold of b is at storage, started from m1's hint
	z := listPut("k", "z").Document
	if r := h.mem.Write(context.Background(), []ports.WriteOp{{Kind: ports.WritePut, Address: stored("k"), Document: z}}); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	r, err := h.s.Read(context.Background(), []domain.Address{listAddr("k")})
	if err != nil || string(r[0].Record.Document.Data) != string(z.Data) {
		t.Fatalf("client read %v %+v, want the other writer's document", err, r)
	}
	readsBefore := h.count.Stats().Reads
	h.next() // conflict: the fold re-reads and writes again
	h.last()
	if b.Status != StatusApplied {
		t.Fatalf("merge b: %+v", b)
	}
	if got := h.list("k"); got != "z,b" {
		t.Fatalf("record holds %q, want z,b (b applied to the other writer's document)", got)
	}
	st := h.count.Stats()
	if st.Conflicts != 1 || st.Reads-readsBefore != 1 || st.Writes != 4 {
		t.Fatalf("storage calls %+v (reads before the conflict %d), want 1 conflict, 1 re-read, 4 writes", st, readsBefore)
	}
}

// counterProfile adds the intent's N to the record's N.
type counterProfile struct{}

type counterDoc struct{ N int }

func (counterProfile) Name() string           { return "counter" }
func (counterProfile) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (counterProfile) Merge(_ context.Context, in ports.MergeInput) (domain.Document, error) {
	var cur, intent counterDoc
	if in.Current != nil {
		if err := json.Unmarshal(in.Current.Data, &cur); err != nil {
			return domain.Document{}, err
		}
	}
	if err := json.Unmarshal(in.Intent.Data, &intent); err != nil {
		return domain.Document{}, err
	}
	cur.N += intent.N
	b, _ := json.Marshal(cur)
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: b}, nil
}

// Concurrent merges through the service and increments by a writer that
// bypasses it (compare-and-set on the memory store): no update is lost,
// whatever hints the folds start from.
func TestNoLostUpdateWithExternalWriter(t *testing.T) {
	mem := memory.New()
	// A round trip, so that batches overlap and folds start from hints.
	count := storagetest.NewDelayed(mem, 200*time.Microsecond)
	cfg := DefaultConfig()
	cfg.Batch = BatchPolicy{Enabled: true, MaxOps: 1000, Shards: 1}
	cfg.Merge.MaxAttempts = 1000
	s, err := NewService(cfg, count, []ports.MergeProfile{counterProfile{}})
	if err != nil {
		t.Fatal(err)
	}
	a := domain.Address{Namespace: "n", Dataset: "d", Key: domain.StringKey("c")}
	sa := a
	sa.Store = cfg.Store
	const clients, merges = 8, 60
	var wg sync.WaitGroup
	applied := make([]int, clients)
	// Each applied merge asks the other writer for one increment, so that
	// its writes fall between the folds throughout the run.
	tick := make(chan struct{}, clients*merges)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < merges; i++ {
				m := domain.Mutation{Kind: domain.MutationMerge, Address: a,
					Merge: domain.MergeIntent{Profile: "counter", Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"N":1}`)}}}
				res, err := s.Write(context.Background(), []domain.Mutation{m}, WaitUntilApplied)
				if err != nil {
					t.Error(err)
					return
				}
				if res[0].Status == StatusApplied {
					applied[c]++
				}
				tick <- struct{}{}
			}
		}()
	}
	external := 0
	done := make(chan struct{})
	go func() { // the other writer: +1000 per increment
		defer close(done)
		for range tick {
			for {
				r := mem.Read(context.Background(), []domain.Address{sa})[0]
				var d counterDoc
				c := ports.Condition{Kind: ports.ConditionAbsent}
				if r.Found {
					if err := json.Unmarshal(r.Record.Document.Data, &d); err != nil {
						t.Error(err)
						return
					}
					c = ports.Condition{Kind: ports.ConditionRevision, Revision: r.Record.Revision}
				}
				doc := domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"N":` + strconv.Itoa(d.N+1000) + `}`)}
				if w := mem.Write(context.Background(), []ports.WriteOp{{Kind: ports.WritePut, Address: sa, Document: doc, Condition: c}}); w[0].Err == nil {
					external++
					break
				}
			}
		}
	}()
	wg.Wait()
	close(tick)
	<-done
	total := 0
	for _, n := range applied {
		total += n
	}
	r := mem.Read(context.Background(), []domain.Address{sa})[0]
	var d counterDoc
	if err := json.Unmarshal(r.Record.Document.Data, &d); err != nil {
		t.Fatal(err)
	}
	if want := external*1000 + total; d.N != want {
		t.Fatalf("counter is %d, want %d (%d external increments of 1000, %d merges applied)", d.N, want, external, total)
	}
	if total != clients*merges {
		t.Fatalf("%d of %d merges applied", total, clients*merges)
	}
	st := count.Stats()
	t.Logf("storage: %+v for %d merges", st, total)
	if st.Reads >= st.Writes {
		t.Fatalf("storage %+v: folds did not start from hints (a read for every write)", st)
	}
}

// The hints of a shard hold the records of at most two batches and at
// most hintsMax records per batch; a record that cannot get a new hint
// loses its old one.
func TestHintsAreBounded(t *testing.T) {
	var h hintTable
	id := func(b, i int) domain.RecordID { return domain.RecordID(fmt.Sprintf("%d/%d", b, i)) }
	doc := domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{}`)}
	for b := 0; b < 3; b++ {
		h.begin()
		for i := 0; i < 10; i++ {
			h.set(id(b, i), recordState{doc: doc, rev: "r"})
		}
	}
	if n := h.len(); n != 20 {
		t.Fatalf("%d hints after 3 batches of 10 records, want the last two batches' 20", n)
	}
	if _, ok := h.get(id(0, 0)); ok {
		t.Fatal("a hint of the batch before the last two was kept")
	}
	if _, ok := h.get(id(1, 0)); !ok {
		t.Fatal("the previous batch's hint was dropped")
	}
	h.begin()
	for i := 0; i < hintsMax+10; i++ {
		h.set(id(3, i), recordState{doc: doc, rev: "r"})
	}
	h.set(id(2, 0), recordState{doc: doc, rev: "new"}) // batch 2's record, now over the bound
	if _, ok := h.get(id(2, 0)); ok {
		t.Fatal("a record over the bound kept its older hint")
	}
	if n := h.len(); n != hintsMax+9 {
		t.Fatalf("%d hints, want %d (this batch's %d and the previous batch's other 9)", n, hintsMax+9, hintsMax)
	}
	h.reset()
	if n := h.len(); n != 0 {
		t.Fatalf("%d hints after reset", n)
	}
}

// apply starts ApplyMutations of muts like write (lead: it reaches
// storage.Write; else it queues behind the batch in flight).
func (h *hinted) apply(muts []domain.Mutation, lead bool) *[]ports.ApplyOutcome {
	out := new([]ports.ApplyOutcome)
	for i := range muts {
		muts[i].Address.Store = "primary"
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		*out = h.s.ApplyMutations(context.Background(), muts)
	}()
	if lead {
		<-h.st.entered
	} else {
		<-h.queued
	}
	return out
}

func queuedAt(m domain.Mutation, id string, off int64) domain.Mutation {
	m.ID, m.Source = id, domain.SourcePosition{Log: "L", Offset: off}
	return m
}

// Hints carry the record's applied mark: a fold that starts from the
// state the service wrote last checks its members against that mark
// without reading the record, so a redelivered merge is skipped, and its
// write's Base is the hint's mark.
func TestFoldFromHintChecksItsMark(t *testing.T) {
	rec := &markRecorder{}
	h := newHinted(t, func(s ports.Storage) ports.Storage { rec.Storage = s; return rec })
	// A new record: its whole mark is known.
	p := h.apply([]domain.Mutation{queuedAt(listPut("k", "p"), "p", 1)}, true)
	a := h.apply([]domain.Mutation{queuedAt(listMerge("k", "a"), "a", 2)}, false)
	// The put is written; the fold of a is at storage.
	h.next()
	// a redelivered, then b:
	b := h.apply([]domain.Mutation{queuedAt(listMerge("k", "a"), "a", 2), queuedAt(listMerge("k", "b"), "b", 3)}, false)
	h.next()
	h.last()
	for _, o := range append(append(*p, *a...), *b...) {
		if o.Err != nil {
			t.Fatalf("outcome %+v", o)
		}
	}
	if (*a)[0].Skipped || !(*b)[0].Skipped || (*b)[1].Skipped {
		t.Fatalf("skipped: a=%v, redelivered a=%v, b=%v; want only the redelivery", (*a)[0].Skipped, (*b)[0].Skipped, (*b)[1].Skipped)
	}
	if got := h.list("k"); got != "p,a,b" {
		t.Fatalf("record holds %q, want p,a,b", got)
	}
	if st := h.count.Stats(); st.Reads != 0 || st.Writes != 3 {
		t.Fatalf("storage calls %+v, want 3 writes and no read", st)
	}
	last := rec.last()
	if last.Mark == nil || last.Mark.Base == nil || strings.Join(last.Mark.IDs, ",") != "b" {
		t.Fatalf("last write's mark %+v, want b with the hint's mark as base", last.Mark)
	}
	if _, ok := last.Mark.Base.Find("a"); !ok || last.Mark.Base.Position.Offset != 2 || len(last.Mark.Base.Recent) != 2 {
		t.Fatalf("base %+v, want p and a at offset 2", last.Mark.Base)
	}
}

// A put of a record the service did not read leaves a hint whose mark is
// only partly known: a fold from it writes without a Base, and storage,
// which checks the whole mark, still refuses a mutation applied before
// the put (the fold then re-reads and skips it).
func TestFoldFromPartlyKnownMarkDefersToStorage(t *testing.T) {
	rec := &markRecorder{}
	h := newHinted(t, func(s ports.Storage) ports.Storage { rec.Storage = s; return rec })
	ctx := context.Background()
	// Another worker applied merge x to the record earlier (mark: x).
	if out := h.mem.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: stored("k"), Document: listPut("k", "o").Document,
		Mark: &ports.MarkUpdate{IDs: []string{"x"}, Keep: 32}}}); out[0].Err != nil {
		t.Fatal(out[0].Err)
	}
	p := h.apply([]domain.Mutation{queuedAt(listPut("k", "p"), "p", 5)}, true) // the record exists: its older mark is unknown
	x := h.apply([]domain.Mutation{queuedAt(listMerge("k", "x"), "x", 6), queuedAt(listMerge("k", "y"), "y", 7)}, false)
	h.next() // the put is written; the fold of x, y is at storage, from the hint
	first := rec.last()
	if first.Mark == nil || first.Mark.Base != nil {
		t.Fatalf("fold from a partly known mark: %+v, want no base", first.Mark)
	}
	h.next() // AlreadyApplied: the fold re-reads, skips x, writes y
	h.last()
	if (*p)[0].Err != nil || (*x)[0].Err != nil || (*x)[1].Err != nil || !(*x)[0].Skipped || (*x)[1].Skipped {
		t.Fatalf("outcomes %+v %+v", *p, *x)
	}
	if got := h.list("k"); got != "p,y" {
		t.Fatalf("record holds %q, want p,y", got)
	}
	if st := h.count.Stats(); st.Reads != 1 {
		t.Fatalf("storage calls %+v, want the one re-read", st)
	}
}

// markRecorder keeps the last write op of each call.
type markRecorder struct {
	ports.Storage
	mu  sync.Mutex
	ops []ports.WriteOp
}

func (r *markRecorder) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	r.mu.Lock()
	r.ops = append(r.ops, ops[len(ops)-1])
	r.mu.Unlock()
	return r.Storage.Write(ctx, ops)
}

func (r *markRecorder) last() ports.WriteOp {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ops[len(r.ops)-1]
}

// deleteAfterWrite plays another writer (another server) that deletes
// record k right after the next write reaches storage, before the service
// learns the write's outcome: the hint the service leaves is stale from
// the start.
type deleteAfterWrite struct {
	ports.Storage
	mem   *memory.Store
	armed atomic.Bool
}

func (d *deleteAfterWrite) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	out := d.Storage.Write(ctx, ops)
	if d.armed.CompareAndSwap(true, false) {
		d.mem.Write(ctx, []ports.WriteOp{{Kind: ports.WriteDelete, Address: stored("k")}})
	}
	return out
}

// A keyed merge retried while the service holds a hint whose mark has the
// key: when the fold would write nothing (the retry is its only mutation),
// the hint's word that it was applied is not taken, as nothing would check
// it; the fold reads the record. Here another writer deleted it (and its
// mark) after the first merge: the retry applies again, as after a read.
func TestDuplicateFromAHintIsReadAgainWhenNothingIsWritten(t *testing.T) {
	d := &deleteAfterWrite{}
	h := newHinted(t, func(s ports.Storage) ports.Storage { d.Storage = s; return d })
	d.mem = h.mem
	merge := listMerge("k", "a")
	merge.ID, merge.Keyed = "key-a", true
	p := h.write(listPut("k", "p"), true)
	a := h.write(merge, false)
	h.next() // the put is written; the fold of a, from the put's hint, is at storage
	d.armed.Store(true)
	retry := h.write(merge, false) // queued behind it
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	h.st.proceed <- struct{}{} // a is written; the other writer deletes the record
	select {
	case <-h.st.entered: // the retry's write: let it through
		h.st.proceed <- struct{}{}
		<-done
	case <-done: // nothing more was written
	}
	if p.Status != StatusApplied || a.Status != StatusApplied || a.Skipped {
		t.Fatalf("put %+v, merge %+v: want both applied", p, a)
	}
	if retry.Status != StatusApplied || retry.Skipped {
		t.Fatalf("retry %+v: want applied again (the record and its mark were deleted after the merge), not skipped on the hint's word", retry)
	}
	if got := h.list("k"); got != "a" {
		t.Fatalf("record holds %q, want a (the retry applied to the deleted record)", got)
	}
	if st := h.count.Stats(); st.Reads != 1 {
		t.Fatalf("storage calls %+v, want the retry's fold to read the record once", st)
	}
}
