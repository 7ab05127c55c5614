package application

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
)

// loggedList is listProfile that logs the item of every merge it runs.
type loggedList struct {
	listProfile
	mu  sync.Mutex
	log []string
}

func (p *loggedList) Merge(ctx context.Context, in ports.MergeInput) (domain.Document, error) {
	var intent listDoc
	_ = json.Unmarshal(in.Intent.Data, &intent)
	p.mu.Lock()
	p.log = append(p.log, intent.A)
	p.mu.Unlock()
	return p.listProfile.Merge(ctx, in)
}

// ran returns the items merged so far, joined.
func (p *loggedList) ran() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, ",")
}

// newPrefolded is newHinted (one shard over a stepped storage) with the
// logged list profile.
func newPrefolded(t *testing.T) (*hinted, *loggedList) {
	t.Helper()
	p := &loggedList{}
	return newHintedWith(t, p), p
}

// newHintedWith is newHinted with profile p instead of the list profile.
func newHintedWith(t *testing.T, p ports.MergeProfile) *hinted {
	t.Helper()
	h := newHinted(t, nil)
	s, err := NewService(h.s.cfg, h.s.storage, []ports.MergeProfile{p})
	if err != nil {
		t.Fatal(err)
	}
	s.writes[0].onQueued = h.s.writes[0].onQueued
	h.s = s
	return h
}

// expectRun checks that the record k holds the list record and that the
// profile ran the merges ran (items joined, in order).
func (h *hinted) expectRun(p *loggedList, k, record, ran string) {
	h.t.Helper()
	if got := h.list(k); got != record {
		h.t.Fatalf("record holds %q, want %q", got, record)
	}
	if got := p.ran(); got != ran {
		h.t.Fatalf("merges run: %q, want %q", got, ran)
	}
}

func (h *hinted) expectApplied(rs ...*WriteResult) {
	h.t.Helper()
	for i, r := range rs {
		if r.Status != StatusApplied {
			h.t.Fatalf("write %d: %+v", i, r)
		}
	}
}

// A single merge that queues behind a batch at storage runs its profile at
// once, on the state that batch is writing (or on the merges queued before
// it), while its caller waits; the next batch's fold then writes those
// results without running the profiles again and without a read.
func TestQueuedMergesRunWhileTheBatchBeforeIsAtStorage(t *testing.T) {
	h, p := newPrefolded(t)
	put := h.write(listPut("k", "p"), true)
	a := h.write(listMerge("k", "a"), false)
	if got := p.ran(); got != "a" {
		t.Fatalf("merges run while the put is at storage: %q, want a", got)
	}
	h.next() // the put is written; the fold of a is at storage
	b := h.write(listMerge("k", "b"), false)
	c := h.write(listMerge("k", "c"), false)
	if got := p.ran(); got != "a,b,c" {
		t.Fatalf("merges run while a is at storage: %q, want a,b,c", got)
	}
	h.next() // the fold of b and c is at storage
	h.last()
	h.expectApplied(put, a, b, c)
	if got := p.ran(); got != "a,b,c" {
		t.Fatalf("merges run: %q, want each once (a,b,c)", got)
	}
	if got := h.list("k"); got != "p,a,b,c" {
		t.Fatalf("record holds %q, want p,a,b,c", got)
	}
	if st := h.count.Stats(); st.Reads != 0 || st.Writes != 3 || st.Conflicts != 0 {
		t.Fatalf("storage calls %+v, want 3 writes and no read", st)
	}
	if b.Revision != c.Revision || b.Revision == a.Revision {
		t.Fatalf("revisions a %q b %q c %q: b and c are one write, after a's", a.Revision, b.Revision, c.Revision)
	}
}

// When the write a prefold started from fails (here: another writer
// changed the record, so the conditional write conflicts and is retried
// from a fresh read), the prefold is not used: the merge runs again on the
// record as it is.
func TestPrefoldOfAFailedWriteIsNotUsed(t *testing.T) {
	h, p := newPrefolded(t)
	h.write(listPut("k", "p"), true)
	a := h.write(listMerge("k", "a"), false)
	h.next() // the fold of a is at storage, conditional on the put's revision
	b := h.write(listMerge("k", "b"), false)
	z := listPut("k", "z").Document
	if r := h.mem.Write(context.Background(), []ports.WriteOp{{Kind: ports.WritePut, Address: stored("k"), Document: z}}); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	h.next() // a conflicts, re-reads z and is at storage again
	h.next() // a is written; the fold of b is at storage
	h.last()
	h.expectApplied(a, b)
	h.expectRun(p, "k", "z,a,b", "a,b,a,b")
}

// A prefold is a guess about the order of the next batch: a put of the
// record between two merges, or a caller that leaves the queue, makes the
// fold use only the prefolded merges that still come first, and run the
// rest itself.
func TestPrefoldFollowsTheBatchOrder(t *testing.T) {
	t.Run("a put between", func(t *testing.T) {
		h, p := newPrefolded(t)
		put := h.write(listPut("k", "p"), true)
		a := h.write(listMerge("k", "a"), false)
		q := h.write(listPut("k", "q"), false)
		b := h.write(listMerge("k", "b"), false)
		if got := p.ran(); got != "a,b" {
			t.Fatalf("merges run ahead: %q, want a,b", got)
		}
		h.next() // the put is written; the next batch's first wave (the fold of a) is at storage
		h.next() // the put of q
		h.next() // the fold of b
		h.last()
		h.expectApplied(put, a, q, b)
		h.expectRun(p, "k", "q,b", "a,b,b")
	})
	t.Run("a caller leaves", func(t *testing.T) {
		h, p := newPrefolded(t)
		put := h.write(listPut("k", "p"), true)
		ctx, cancel := context.WithCancel(context.Background())
		left := make(chan error, 1)
		go func() {
			res, err := h.s.Write(ctx, []domain.Mutation{listMerge("k", "x")}, WaitUntilApplied)
			if err == nil {
				err = res[0].Err
			}
			left <- err
		}()
		<-h.queued
		c := h.write(listMerge("k", "c"), false)
		cancel()
		if err := <-left; domain.CodeOf(err) != domain.CodeCanceled {
			t.Fatalf("the caller that left: %v", err)
		}
		h.next() // the put is written; the fold of c is at storage
		h.last()
		h.expectApplied(put, c)
		h.expectRun(p, "k", "p,c", "x,c,c")
	})
}

// A merge that fails ahead fails only itself, as in a fold: the next one
// applies to the last good document.
func TestPrefoldedFailureFailsOnlyItself(t *testing.T) {
	h, p := newPrefolded(t)
	put := h.write(listPut("k", "p"), true)
	bad := h.write(listMerge("k", ""), false)
	c := h.write(listMerge("k", "c"), false)
	h.next()
	h.last()
	h.expectApplied(put, c)
	if bad.Status == StatusApplied || domain.CodeOf(bad.Err) != domain.CodeInvalidArgument {
		t.Fatalf("the failing merge: %+v", bad)
	}
	h.expectRun(p, "k", "p,c", ",c")
	if hs := &h.s.writes[0].hints; len(hs.pre) != 0 || len(hs.pending) != 0 {
		t.Fatalf("%d prefolds and %d pending states kept after the combiner went idle", len(hs.pre), len(hs.pending))
	}
}

// gatedList is loggedList whose merge of item gate signals reached and
// then waits for release.
type gatedList struct {
	loggedList
	gate             string
	reached, release chan struct{}
}

func (p *gatedList) Merge(ctx context.Context, in ports.MergeInput) (domain.Document, error) {
	var intent listDoc
	_ = json.Unmarshal(in.Intent.Data, &intent)
	if intent.A == p.gate {
		p.reached <- struct{}{}
		<-p.release
	}
	return p.loggedList.Merge(ctx, in)
}

// A merge that queues while the batch before it is still folding (it has
// not sent its write yet) starts its prefold from the record's older
// state; the next batch starts from the state that batch wrote, so the
// prefold is not used, and no update is lost.
func TestPrefoldFromAnOlderStateIsNotUsed(t *testing.T) {
	p := &gatedList{gate: "a2", reached: make(chan struct{}), release: make(chan struct{})}
	h := newHintedWith(t, p)
	put := h.write(listPut("k", "p"), true)
	var two []WriteResult
	h.wg.Add(1)
	go func() { // a job of two merges: not prefolded, its batch folds them
		defer h.wg.Done()
		res, err := h.s.Write(context.Background(), []domain.Mutation{listMerge("k", "a1"), listMerge("k", "a2")}, WaitUntilApplied)
		if err != nil {
			t.Error(err)
		}
		two = res
	}()
	<-h.queued
	h.st.proceed <- struct{}{} // the put is written; the next batch folds a1, then waits in a2
	<-p.reached
	b := h.write(listMerge("k", "b"), false) // prefolded on the put's state
	if got := p.ran(); got != "a1,b" {
		t.Fatalf("merges run: %q, want a1 (the batch) and b (ahead, on p)", got)
	}
	close(p.release)
	<-h.st.entered // the fold of a1 and a2
	h.next()       // the fold of b
	h.last()
	h.expectApplied(put, &two[0], &two[1], b)
	h.expectRun(&p.loggedList, "k", "p,a1,a2,b", "a1,b,a2,b")
}

// A profile that runs long in a prefold holds no lock: callers still
// queue (one that queues meanwhile is not prefolded; its batch runs its
// merge), and the batch takes what was prefolded.
func TestSlowPrefoldBlocksNoOne(t *testing.T) {
	p := &gatedList{gate: "b", reached: make(chan struct{}), release: make(chan struct{})}
	h := newHintedWith(t, p)
	put := h.write(listPut("k", "p"), true)
	var b WriteResult
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		res, err := h.s.Write(context.Background(), []domain.Mutation{listMerge("k", "b")}, WaitUntilApplied)
		if err != nil {
			t.Error(err)
			return
		}
		b = res[0]
	}()
	<-p.reached // b's prefold is in its profile
	queued := make(chan *WriteResult)
	go func() { queued <- h.write(listMerge("k", "c"), false) }()
	var c *WriteResult
	select {
	case c = <-queued:
	case <-time.After(10 * time.Second): // a failure guard, not synchronisation
		t.Fatal("a caller could not queue while another caller's prefold ran")
	}
	if got := p.ran(); got != "" {
		t.Fatalf("merges run: %q, want none yet (c is not prefolded while b's runs)", got)
	}
	close(p.release)
	<-h.queued // b queued (its hook returned)
	h.next()   // the put is written; the fold of b and c is at storage
	h.last()
	h.expectApplied(put, &b, c)
	h.expectRun(&p.loggedList, "k", "p,b,c", "b,c")
}

// Many callers merging one record, some with single merges (prefolded)
// and some with two merges in one request (folded by their batch, which
// gives later callers time to queue on an older state): every applied
// merge counts once in the record.
func TestPrefoldsLoseNoUpdate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Batch = BatchPolicy{Enabled: true, MaxOps: 1000, Shards: 1}
	s, err := NewService(cfg, storagetest.NewDelayed(memory.New(), 100*time.Microsecond), []ports.MergeProfile{counterProfile{}})
	if err != nil {
		t.Fatal(err)
	}
	a := domain.Address{Namespace: "n", Dataset: "d", Key: domain.StringKey("c")}
	inc := domain.Mutation{Kind: domain.MutationMerge, Address: a,
		Merge: domain.MergeIntent{Profile: "counter", Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"N":1}`)}}}
	const clients, requests = 12, 80
	var wg sync.WaitGroup
	applied := make([]int, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range requests {
				muts := []domain.Mutation{inc}
				if (c+i)%3 == 0 {
					muts = append(muts, inc)
				}
				res, err := s.Write(context.Background(), muts, WaitUntilApplied)
				if err != nil {
					t.Error(err)
					return
				}
				for _, r := range res {
					if r.Status == StatusApplied {
						applied[c]++
					}
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, n := range applied {
		total += n
	}
	r, err := s.Read(context.Background(), []domain.Address{a})
	if err != nil || r[0].Status != StatusFound {
		t.Fatalf("read: %v %+v", err, r)
	}
	var d counterDoc
	if err := json.Unmarshal(r[0].Record.Document.Data, &d); err != nil {
		t.Fatal(err)
	}
	if d.N != total {
		t.Fatalf("counter is %d after %d applied merges", d.N, total)
	}
}

// A prefold that no batch takes (its caller left the queue) is dropped
// once a second batch has begun after it, also while the shard stays
// busy, so that it does not keep its caller's documents.
func TestUntakenPrefoldIsDropped(t *testing.T) {
	h, p := newPrefolded(t)
	h.write(listPut("k", "p"), true)
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := h.s.Write(ctx, []domain.Mutation{listMerge("k", "x")}, WaitUntilApplied)
		left <- err
	}()
	<-h.queued
	cancel()
	<-left
	prefolds := func() int {
		hs := &h.s.writes[0].hints
		hs.preMu.Lock()
		defer hs.preMu.Unlock()
		return len(hs.pre)
	}
	if got := p.ran(); got != "x" || prefolds() != 1 {
		t.Fatalf("merges run %q, %d prefolds: want x's prefold kept", got, prefolds())
	}
	h.write(listPut("k2", "q"), false)
	h.next() // the put of p is written; the batch of q is at storage
	if n := prefolds(); n != 1 {
		t.Fatalf("%d prefolds one batch later, want x's (it may be for this batch)", n)
	}
	h.write(listPut("k3", "r"), false)
	h.next() // the batch of r is at storage
	if n := prefolds(); n != 0 {
		t.Fatalf("%d prefolds two batches later, want none", n)
	}
	h.last()
}
