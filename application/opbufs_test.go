package application

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// releaseCounts counts the buffers released: several mutations'
// (opBufs) and one mutation's (oneBufs).
type releaseCounts struct{ several, one atomic.Int64 }

// poisonReleased makes every opBufs and oneBufs released from now to the
// end of the test poisoned: its mutations become puts of record
// "poisoned" and its record IDs that record's, so that a batch that still
// used buffers released under it would write that record instead of its
// own. It counts the buffers released from now on.
func poisonReleased(t *testing.T) *releaseCounts {
	t.Helper()
	var n releaseCounts
	poison := listPut("poisoned", "poison")
	poison.Address.Store = DefaultConfig().Store
	released = func(b *opBufs) {
		n.several.Add(1)
		// Up to their capacity, as release empties them: a pooled
		// buffer reused for fewer operations is shorter than that.
		work, ids := b.work[:cap(b.work)], b.ids[:cap(b.ids)]
		for i := range work {
			work[i] = poison
		}
		for i := range ids {
			ids[i] = poison.Address.ID()
		}
	}
	oneBufPool.released = func(b *oneBufs) {
		n.one.Add(1)
		b.work[0] = poison
	}
	t.Cleanup(func() { released, oneBufPool.released = nil, nil })
	return &n
}

// A request of several mutations that leads a batch and leaves it at its
// deadline while the batch is at storage does not give its buffers back
// to the pool: the batch goes on with its mutations (here, the second
// wave writes its second put of the record after it left) and must find
// them as they were. Released, they would be poisoned (and reusable by
// the next request), and the batch would write "poisoned" instead.
func TestLeftCallersBuffersAreNotReleasedUnderItsBatch(t *testing.T) {
	releases := poisonReleased(t)
	b := newBatchAt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	lead := make(chan []WriteResult, 1)
	go func() {
		res, _ := b.s.Write(ctx, []domain.Mutation{listPut("left", "1"), listPut("left", "2")}, WaitUntilApplied)
		lead <- res
	}()
	<-b.queued
	carried := make(chan []WriteResult, 1)
	go func() {
		res, _ := b.s.Write(context.Background(), []domain.Mutation{listPut("carried", "y")}, WaitUntilApplied)
		carried <- res
	}()
	<-b.queued
	b.st.proceed <- struct{}{} // the first write returns
	<-b.st.entered             // the batch's first wave is at storage
	var res []WriteResult
	select {
	case res = <-lead:
	case <-time.After(10 * time.Second): // a failure guard
		t.Fatal("the batch's leader waited for the batch past its deadline")
	}
	if e := res[1].Err; e == nil || e.Code != domain.CodeOutcomeUnknown {
		t.Fatalf("leader past its deadline: %+v", res[1])
	}
	b.st.proceed <- struct{}{} // the first wave returns
	<-b.st.entered             // the second: the leader's second put
	b.st.proceed <- struct{}{}
	if r := <-carried; r[0].Status != StatusApplied {
		t.Fatalf("the carried request: %+v", r[0])
	}
	b.wg.Wait()
	expectBatchWrote(t, b.s, "left", "2", "the leader's second put")
	if n := releases.several.Load(); n != 0 {
		t.Fatalf("%d buffers released; the leader's that left must not be", n)
	}
	// A request that stays to the end releases its own.
	go func() { <-b.st.entered; b.st.proceed <- struct{}{} }()
	if _, err := b.s.Write(context.Background(), []domain.Mutation{listPut("a", "x"), listPut("b", "x")}, WaitUntilApplied); err != nil {
		t.Fatal(err)
	}
	if n := releases.several.Load(); n != 1 {
		t.Fatalf("%d buffers released after a request that stayed, want 1", n)
	}
}

// So does a request of one mutation carried in a batch: here its put is
// the batch's second write of a record, which the batch makes after the
// caller left (it builds the write from the caller's mutation then).
func TestLeftSingleCallersBuffersAreNotReleased(t *testing.T) {
	releases := poisonReleased(t)
	b := newBatchAt(t) // its first write, of a single put, is at storage
	lead := make(chan []WriteResult, 1)
	go func() {
		res, _ := b.s.Write(context.Background(), []domain.Mutation{listPut("rec", "lead")}, WaitUntilApplied)
		lead <- res
	}()
	<-b.queued
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	left := make(chan []WriteResult, 1)
	go func() {
		res, _ := b.s.Write(ctx, []domain.Mutation{listPut("rec", "left")}, WaitUntilApplied)
		left <- res
	}()
	<-b.queued
	b.st.proceed <- struct{}{} // the first write returns
	<-b.st.entered             // the batch's first wave: the leader's put
	var res []WriteResult
	select {
	case res = <-left:
	case <-time.After(10 * time.Second): // a failure guard
		t.Fatal("the carried caller waited for its batch past its deadline")
	}
	if e := res[0].Err; e == nil || e.Code != domain.CodeOutcomeUnknown {
		t.Fatalf("carried caller past its deadline: %+v", res[0])
	}
	if n := releases.one.Load(); n != 1 {
		t.Fatalf("%d buffers released before the batch went on, want the first write's (1)", n)
	}
	b.st.proceed <- struct{}{} // the first wave returns
	<-b.st.entered             // the second: the put of the caller that left
	b.st.proceed <- struct{}{}
	if r := <-lead; r[0].Status != StatusApplied {
		t.Fatalf("the leader: %+v", r[0])
	}
	b.wg.Wait()
	expectBatchWrote(t, b.s, "rec", "left", "the put of the caller that left")
	if n := releases.one.Load(); n != 2 {
		t.Fatalf("%d buffers released, want the first write's and the leader's (2), not those of the caller that left", n)
	}
}

// expectBatchWrote checks, after a batch that carried a caller who left,
// that record key holds the list [want] (what: which write that is) and
// that nothing wrote the record of poisonReleased's mutations.
func expectBatchWrote(t *testing.T, s *Service, key, want, what string) {
	t.Helper()
	r, err := s.Read(context.Background(), []domain.Address{listAddr(key), listAddr("poisoned")})
	if err != nil {
		t.Fatal(err)
	}
	var d listDoc
	if r[0].Status != StatusFound || json.Unmarshal(r[0].Record.Document.Data, &d) != nil || !slices.Equal(d.L, []string{want}) {
		t.Fatalf("record %s after its batch: %+v (%s), want %s", key, r[0], r[0].Record.Document.Data, what)
	}
	if r[1].Status != StatusNotFound {
		t.Fatalf("the batch wrote from released buffers: %+v", r[1])
	}
}

// Buffers released are emptied before they are pooled (they keep no
// request's documents, names or errors alive), and buffers above
// maxPooledOps are not pooled.
func TestReleasedBuffersAreEmptiedAndBounded(t *testing.T) {
	var got []*opBufs
	released = func(b *opBufs) { got = append(got, b) }
	defer func() { released = nil }()
	b := getOpBufs(3)
	for i := range b.work {
		b.work[i] = listPut("k", "v")
		b.datasets[i] = b.work[i].Address.DatasetRef()
		b.admitted[i] = true
		b.errs[i] = domain.Errorf(domain.CodeInternal, "e")
		b.ids[i] = b.work[i].Address.ID()
		b.outcomes[i].Dataset = b.datasets[i]
	}
	b.valid = append(b.valid, 0, 1, 2)
	b.release()
	if len(got) != 1 || got[0] != b {
		t.Fatalf("released %d buffers", len(got))
	}
	// Up to their capacity (the pool may have given buffers for more
	// operations, reused for three).
	work, datasets, admitted := b.work[:cap(b.work)], b.datasets[:cap(b.datasets)], b.admitted[:cap(b.admitted)]
	errs, ids, outcomes := b.errs[:cap(b.errs)], b.ids[:cap(b.ids)], b.outcomes[:cap(b.outcomes)]
	for i := range work {
		if work[i].Document.Data != nil || work[i].Address.Key.Size() != 0 || datasets[i].Dataset != "" || admitted[i] ||
			errs[i] != nil || ids[i] != "" || outcomes[i].Dataset.Dataset != "" {
			t.Fatalf("released buffers keep operation %d: %+v", i, work[i])
		}
	}
	big := getOpBufs(maxPooledOps + 1)
	big.release()
	if len(got) != 1 {
		t.Fatal("buffers above maxPooledOps were pooled")
	}
}

// leftReaderRun runs, on the one-shard service s over st, a reader that
// leaves the read batch carrying it: a first read holds storage while a
// reader of leftKeys (with a 100 ms deadline) and then one of carriedKeys
// queue behind it; the first returns, the batch of the two goes to
// storage, and the first of the two returns at its deadline while the
// batch is still there (onLeft, when not nil, gets its results in its
// goroutine before that); then the batch returns. It returns the two
// readers' results once every read has ended.
func leftReaderRun(t *testing.T, s *Service, st *readCtxStorage, leftKeys, carriedKeys []string, onLeft func([]ReadResult)) (left, carried []ReadResult) {
	t.Helper()
	queued := make(chan struct{})
	s.reads[0].onQueued = func() { queued <- struct{}{} }
	defer func() { s.reads[0].onQueued = nil }()
	var wg sync.WaitGroup
	read := func(ctx context.Context, onDone func([]ReadResult), keys ...string) chan []ReadResult {
		out := make(chan []ReadResult, 1)
		addrs := make([]domain.Address, len(keys))
		for i, k := range keys {
			addrs[i] = listAddr(k)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _ := s.Read(ctx, addrs)
			if onDone != nil {
				onDone(r)
			}
			out <- r
		}()
		return out
	}
	read(context.Background(), nil, "first")
	<-st.entered // the first read is at storage
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	leaving := read(ctx, onLeft, leftKeys...)
	<-queued
	staying := read(context.Background(), nil, carriedKeys...)
	<-queued
	st.proceed <- struct{}{} // the first read returns
	<-st.entered             // the batch of the two queued readers is at storage
	select {
	case left = <-leaving:
	case <-time.After(10 * time.Second): // a failure guard
		t.Fatal("the reader waited for the batch past its deadline")
	}
	st.proceed <- struct{}{}
	carried = <-staying
	wg.Wait()
	return left, carried
}

// readCtxStorage hands the context of each Read to the test and waits for
// a token on proceed.
type readCtxStorage struct {
	ports.Storage
	entered chan context.Context
	proceed chan struct{}
}

func (s *readCtxStorage) Read(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	s.entered <- ctx
	<-s.proceed
	return s.Storage.Read(ctx, addrs)
}

// A Read of several addresses that leaves the read batch carrying it at
// its deadline does not give its buffers (its addresses among them) back
// to the pool; one that stays to the end does.
func TestLeftReadersBuffersAreNotReleased(t *testing.T) {
	var releases atomic.Int64
	releasedReads = func(*readBufs) { releases.Add(1) }
	t.Cleanup(func() { releasedReads = nil })
	st := &readCtxStorage{Storage: memory.New(), entered: make(chan context.Context), proceed: make(chan struct{})}
	s := oneShardService(t, st)
	res, carried := leftReaderRun(t, s, st, []string{"a", "b"}, []string{"c"}, nil)
	if res[0].Err == nil {
		t.Fatalf("reader past its deadline: %+v", res[0])
	}
	if carried[0].Status != StatusNotFound {
		t.Fatalf("the carried reader: %+v", carried[0])
	}
	if n := releases.Load(); n != 0 {
		t.Fatalf("%d read buffers released; those of the reader that left must not be", n)
	}
	go func() { <-st.entered; st.proceed <- struct{}{} }()
	if _, err := s.Read(context.Background(), []domain.Address{listAddr("a"), listAddr("b")}); err != nil {
		t.Fatal(err)
	}
	if n := releases.Load(); n != 1 {
		t.Fatalf("%d read buffers released after a Read that stayed, want 1", n)
	}
}

// So does a Read of one address, whose job is in its pooled buffers: the
// batch still writes the job's results after the reader left.
func TestLeftSingleReadersBuffersAreNotReleased(t *testing.T) {
	var releases atomic.Int64
	oneReadBufPool.released = func(*oneReadBufs) { releases.Add(1) }
	t.Cleanup(func() { oneReadBufPool.released = nil })
	st := &readCtxStorage{Storage: memory.New(), entered: make(chan context.Context), proceed: make(chan struct{})}
	s := oneShardService(t, st)
	res, carried := leftReaderRun(t, s, st, []string{"a"}, []string{"c"}, nil)
	if res[0].Err == nil {
		t.Fatalf("reader past its deadline: %+v", res[0])
	}
	if carried[0].Status != StatusNotFound {
		t.Fatalf("the carried reader: %+v", carried[0])
	}
	if n := releases.Load(); n != 2 {
		t.Fatalf("%d read buffers released, want the first reader's and the carried one's (2), not those of the reader that left", n)
	}
}
