package application

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// gated wraps a storage: the first Write call waits at the gate (entered
// is closed when it arrives) until open is closed, and every call is
// recorded.
type gated struct {
	ports.Storage
	entered, open chan struct{}
	once          sync.Once

	mu     sync.Mutex
	calls  []string // "read:n" / "write:n"
	writes [][]ports.WriteOp
	// between, when set, runs before write call number call (from 0)
	// reaches the storage (a concurrent writer).
	between func(call int)
}

func newGated() *gated {
	return &gated{Storage: memory.New(), entered: make(chan struct{}), open: make(chan struct{})}
}

func (g *gated) Read(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	g.mu.Lock()
	g.calls = append(g.calls, "read")
	g.mu.Unlock()
	return g.Storage.Read(ctx, addrs)
}

func (g *gated) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	g.once.Do(func() {
		close(g.entered)
		<-g.open
	})
	g.mu.Lock()
	g.calls = append(g.calls, "write")
	g.writes = append(g.writes, append([]ports.WriteOp(nil), ops...))
	call, between := len(g.writes)-1, g.between
	g.mu.Unlock()
	if between != nil {
		between(call)
	}
	return g.Storage.Write(ctx, ops)
}

// listProfile appends the intent's A to the record's list L; an empty A
// is rejected.
type listProfile struct{}

type listDoc struct {
	L []string `json:",omitempty"`
	A string   `json:",omitempty"`
}

func (listProfile) Name() string           { return "list" }
func (listProfile) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (listProfile) Merge(_ context.Context, in ports.MergeInput) (domain.Document, error) {
	var cur, intent listDoc
	if in.Current != nil {
		if err := json.Unmarshal(in.Current.Data, &cur); err != nil {
			return domain.Document{}, err
		}
	}
	if err := json.Unmarshal(in.Intent.Data, &intent); err != nil || intent.A == "" {
		return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "empty item")
	}
	cur.L = append(cur.L, intent.A)
	b, _ := json.Marshal(cur)
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: b}, nil
}

func listAddr(k string) domain.Address {
	return domain.Address{Namespace: "n", Dataset: "d", Key: domain.StringKey(k)}
}

// stored is the address as the service stores it (with its store).
func stored(k string) domain.Address {
	a := listAddr(k)
	a.Store = DefaultConfig().Store
	return a
}

// oneShardService returns a service over st with natural batching on, in
// one shard, and the list profile.
func oneShardService(t *testing.T, st ports.Storage) *Service {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Batch = BatchPolicy{Enabled: true, MaxOps: 1000, Shards: 1}
	s, err := NewService(cfg, st, []ports.MergeProfile{listProfile{}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func listMerge(k, item string) domain.Mutation {
	b, _ := json.Marshal(listDoc{A: item})
	return domain.Mutation{Kind: domain.MutationMerge, Address: listAddr(k),
		Merge: domain.MergeIntent{Profile: "list", Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: b}}}
}

func listPut(k string, items ...string) domain.Mutation {
	b, _ := json.Marshal(listDoc{L: items})
	return domain.Mutation{Kind: domain.MutationPut, Address: listAddr(k), Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: b}}
}

// batchObserver records Combined calls.
type batchObserver struct {
	ports.NopObserver
	mu       sync.Mutex
	combined map[ports.StorageCall][]int
}

func (o *batchObserver) Combined(call ports.StorageCall, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.combined == nil {
		o.combined = map[ports.StorageCall][]int{}
	}
	o.combined[call] = append(o.combined[call], n)
}

// contention starts a service over a gated storage with batching on, and
// a first write (a put of record "first") that holds the storage until
// release is called; queue(f) runs f in a new goroutine and returns once
// f's work waits in the write combiner.
type contention struct {
	t       *testing.T
	s       *Service
	st      *gated
	obs     *batchObserver
	queued  chan struct{}
	wg      sync.WaitGroup
	release func()
}

func newContention(t *testing.T, maxOps int) *contention {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Batch = BatchPolicy{Enabled: true, MaxOps: maxOps, Shards: 1}
	c := &contention{t: t, st: newGated(), obs: &batchObserver{}, queued: make(chan struct{})}
	s, err := NewService(cfg, c.st, []ports.MergeProfile{listProfile{}}, WithObserver(c.obs))
	if err != nil {
		t.Fatal(err)
	}
	c.s = s
	s.writes[0].onQueued = func() { c.queued <- struct{}{} }
	s.reads[0].onQueued = func() { c.queued <- struct{}{} }
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		res, err := s.Write(context.Background(), []domain.Mutation{listPut("first", "x")}, WaitUntilApplied)
		if err != nil || res[0].Status != StatusApplied {
			t.Errorf("first put: %v %+v", err, res)
		}
	}()
	<-c.st.entered
	c.release = func() { close(c.st.open); c.wg.Wait() }
	return c
}

// write queues one Write of muts and returns where its results will be.
func (c *contention) write(ctx context.Context, muts ...domain.Mutation) *[]WriteResult {
	out := new([]WriteResult)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		res, err := c.s.Write(ctx, muts, WaitUntilApplied)
		if err != nil {
			c.t.Errorf("write: %v", err)
		}
		*out = res
	}()
	<-c.queued
	return out
}

func (c *contention) list(k string) []string {
	c.t.Helper()
	r, err := c.s.Read(context.Background(), []domain.Address{listAddr(k)})
	if err != nil || r[0].Status != StatusFound {
		c.t.Fatalf("read %s: %v %+v", k, err, r)
	}
	var d listDoc
	if err := json.Unmarshal(r[0].Record.Document.Data, &d); err != nil {
		c.t.Fatal(err)
	}
	return d.L
}

// Merges of one record from concurrent requests that wait together fold
// into one read and one conditional write, applied in arrival order; a
// failing intent fails only itself; every folded merge reports the
// revision of that one write.
func TestConcurrentMergesFoldIntoOneReadModifyWrite(t *testing.T) {
	c := newContention(t, 1000)
	var results []*[]WriteResult
	for _, item := range []string{"a", "b", "", "c"} {
		results = append(results, c.write(context.Background(), listMerge("hot", item)))
	}
	// A request with two merges of the record folds with the others too.
	results = append(results, c.write(context.Background(), listMerge("hot", "d"), listMerge("hot", "e")))
	c.release()

	if got := strings.Join(c.list("hot"), ","); got != "a,b,c,d,e" {
		t.Fatalf("record holds %q, want the merges in arrival order a,b,c,d,e", got)
	}
	c.st.mu.Lock()
	calls := strings.Join(c.st.calls, " ")
	c.st.mu.Unlock()
	// The first put, then one read and one write for all six merges.
	if calls != "write read write read" { // the last read is c.list's
		t.Fatalf("storage calls: %s", calls)
	}
	bad := (*results[2])[0]
	if bad.Status != StatusFailed || bad.Err == nil || bad.Err.Code != domain.CodeInvalidArgument || !strings.Contains(bad.Err.Message, "empty item") {
		t.Fatalf("the failing merge: %+v", bad)
	}
	var rev domain.Revision
	for k, r := range results {
		for _, res := range *r {
			if k == 2 {
				continue
			}
			if res.Status != StatusApplied {
				t.Fatalf("request %d: %+v", k, res)
			}
			if rev.IsZero() {
				rev = res.Revision
			}
			if res.Revision != rev {
				t.Fatalf("folded merges report different revisions: %v and %v", rev, res.Revision)
			}
		}
	}
	r, _ := c.s.Read(context.Background(), []domain.Address{listAddr("hot")})
	if r[0].Record.Revision != rev {
		t.Fatalf("folded merges report revision %v, the record has %v", rev, r[0].Record.Revision)
	}
	c.obs.mu.Lock()
	defer c.obs.mu.Unlock()
	if got := c.obs.combined[ports.StorageWrite]; len(got) != 2 || got[0] != 1 || got[1] != 5 {
		t.Fatalf("write batches (callers): %v, want [1 5]", got)
	}
}

// A fold never crosses a put of its record: merge, put, merge queued in
// that order apply in that order, as two folds around the put.
func TestFoldDoesNotCrossPut(t *testing.T) {
	c := newContention(t, 1000)
	m1 := c.write(context.Background(), listMerge("k", "a"))
	p := c.write(context.Background(), listPut("k", "p"))
	m2 := c.write(context.Background(), listMerge("k", "b"))
	m3 := c.write(context.Background(), listMerge("k", "c"))
	c.release()
	if got := strings.Join(c.list("k"), ","); got != "p,b,c" {
		t.Fatalf("record holds %q, want p,b,c", got)
	}
	for _, r := range []*[]WriteResult{m1, p, m2, m3} {
		if (*r)[0].Status != StatusApplied {
			t.Fatalf("result %+v", (*r)[0])
		}
	}
	if (*m1)[0].Revision == (*m2)[0].Revision || (*m2)[0].Revision != (*m3)[0].Revision {
		t.Fatalf("revisions: m1 %v, m2 %v, m3 %v; want m2 = m3 ≠ m1", (*m1)[0].Revision, (*m2)[0].Revision, (*m3)[0].Revision)
	}
}

// Single puts that wait while a write is at storage go to storage as one
// batch, bounded by MaxOps.
func TestWaitingWritesBatchUpToMaxOps(t *testing.T) {
	c := newContention(t, 3)
	var results []*[]WriteResult
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		results = append(results, c.write(context.Background(), listPut(k, k)))
	}
	c.release()
	for k, r := range results {
		if (*r)[0].Status != StatusApplied {
			t.Fatalf("put %d: %+v", k, (*r)[0])
		}
	}
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	var sizes []int
	for _, w := range c.st.writes {
		sizes = append(sizes, len(w))
	}
	if len(sizes) != 3 || sizes[0] != 1 || sizes[1] != 3 || sizes[2] != 2 {
		t.Fatalf("storage write sizes %v, want [1 3 2]", sizes)
	}
}

// A caller whose context ends while it waits leaves the queue with its
// context's error; its write never reaches storage.
func TestCanceledWaiterLeavesTheQueue(t *testing.T) {
	c := newContention(t, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	gone := c.write(ctx, listPut("gone", "x"))
	kept := c.write(context.Background(), listPut("kept", "y"))
	cancel()
	// Wait until the canceled caller left (its result is written before
	// Write returns; the goroutine does not need the storage).
	for {
		c.s.writes[0].mu.Lock()
		n := len(c.s.writes[0].queue)
		c.s.writes[0].mu.Unlock()
		if n == 1 {
			break
		}
	}
	c.release()
	if r := (*gone)[0]; r.Err == nil || r.Err.Code != domain.CodeCanceled {
		t.Fatalf("canceled put: %+v", r)
	}
	if r := (*kept)[0]; r.Status != StatusApplied {
		t.Fatalf("kept put: %+v", r)
	}
	r, err := c.s.Read(context.Background(), []domain.Address{listAddr("gone")})
	if err != nil || r[0].Status != StatusNotFound {
		t.Fatalf("the canceled put reached storage: %v %+v", err, r)
	}
}

// When a fold's write meets a concurrent change, the whole fold is
// retried: re-read, every merge applied again on the new document.
func TestFoldRetriesWholeOnConflict(t *testing.T) {
	c := newContention(t, 1000)
	a := c.write(context.Background(), listMerge("k", "a"))
	b := c.write(context.Background(), listMerge("k", "b"))
	c.st.mu.Lock()
	c.st.between = func(call int) {
		if call == 1 { // the fold's first write: another writer was faster
			r := c.st.Storage.Write(context.Background(), []ports.WriteOp{{Kind: ports.WritePut, Address: stored("k"), Document: listPut("k", "z").Document}})
			if r[0].Err != nil {
				t.Error(r[0].Err)
			}
		}
	}
	c.st.mu.Unlock()
	c.release()
	if got := strings.Join(c.list("k"), ","); got != "z,a,b" {
		t.Fatalf("record holds %q, want z,a,b; calls %v", got, c.st.calls)
	}
	for _, r := range []*[]WriteResult{a, b} {
		if (*r)[0].Status != StatusApplied || (*r)[0].Revision != (*a)[0].Revision {
			t.Fatalf("result %+v", (*r)[0])
		}
	}
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if calls := strings.Join(c.st.calls, " "); calls != "write read write read write read" {
		t.Fatalf("storage calls: %s", calls)
	}
}

// readGated holds its first Read until open is closed.
type readGated struct {
	ports.Storage
	entered, open chan struct{}
	once          sync.Once
	mu            sync.Mutex
	reads         [][]domain.Address
}

func (g *readGated) Read(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	g.once.Do(func() {
		close(g.entered)
		<-g.open
	})
	g.mu.Lock()
	g.reads = append(g.reads, addrs)
	g.mu.Unlock()
	return g.Storage.Read(ctx, addrs)
}

// Single reads that wait while a read is at storage go to storage as one
// read, each caller getting its own results.
func TestWaitingReadsBatch(t *testing.T) {
	st := &readGated{Storage: memory.New(), entered: make(chan struct{}), open: make(chan struct{})}
	s := oneShardService(t, st)
	for _, k := range []string{"a", "b"} {
		if res, err := s.Write(context.Background(), []domain.Mutation{listPut(k, k)}, WaitUntilApplied); err != nil || res[0].Status != StatusApplied {
			t.Fatalf("put %s: %v %+v", k, err, res)
		}
	}
	queued := make(chan struct{})
	s.reads[0].onQueued = func() { queued <- struct{}{} }
	var wg sync.WaitGroup
	got := make([][]ReadResult, 4)
	keys := [][]string{{"a"}, {"b"}, {"missing"}, {"b", "a"}}
	for i, ks := range keys {
		addrs := make([]domain.Address, len(ks))
		for j, k := range ks {
			addrs[j] = listAddr(k)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.Read(context.Background(), addrs)
			if err != nil {
				t.Error(err)
			}
			got[i] = r
		}()
		if i == 0 {
			<-st.entered
		} else {
			<-queued
		}
	}
	close(st.open)
	wg.Wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.reads) != 2 || len(st.reads[0]) != 1 || len(st.reads[1]) != 4 {
		t.Fatalf("storage reads %v, want one of 1 then one of 4", st.reads)
	}
	want := [][]string{{"a"}, {"b"}, {""}, {"b", "a"}}
	for i, rs := range got {
		for j, r := range rs {
			var d listDoc
			if want[i][j] == "" {
				if r.Status != StatusNotFound {
					t.Fatalf("read %d.%d: %+v", i, j, r)
				}
				continue
			}
			if r.Status != StatusFound || json.Unmarshal(r.Record.Document.Data, &d) != nil || strings.Join(d.L, ",") != want[i][j] {
				t.Fatalf("read %d.%d: %+v, want %s", i, j, r, want[i][j])
			}
		}
	}
}

// The worker path folds consecutive merges of one record in its batch
// too; a failing merge fails only itself.
func TestApplyMutationsFolds(t *testing.T) {
	st := newGated()
	close(st.open)
	s, err := NewService(DefaultConfig(), st, []ports.MergeProfile{listProfile{}})
	if err != nil {
		t.Fatal(err)
	}
	muts := []domain.Mutation{listMerge("k", "a"), listMerge("k", ""), listMerge("k", "c"), listPut("other", "o")}
	for i := range muts {
		muts[i].ID = NewMutationID()
		muts[i].Address.Store = "primary"
	}
	out := s.ApplyMutations(context.Background(), muts)
	for i, o := range out {
		if (i == 1) != (o.Err != nil) {
			t.Fatalf("mutation %d: %v", i, o.Err)
		}
	}
	if domain.CodeOf(out[1].Err) != domain.CodeInvalidArgument || out[1].Attempts != 1 {
		t.Fatalf("failing merge: %+v", out[1])
	}
	st.mu.Lock()
	calls := strings.Join(st.calls, " ")
	st.mu.Unlock()
	if calls != "read write" {
		t.Fatalf("storage calls %q, want one read and one write", calls)
	}
	r, _ := s.Read(context.Background(), []domain.Address{listAddr("k")})
	var d listDoc
	if err := json.Unmarshal(r[0].Record.Document.Data, &d); err != nil || strings.Join(d.L, ",") != "a,c" {
		t.Fatalf("record: %s", r[0].Record.Document.Data)
	}
}

func TestBatchPolicyIsValidated(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Batch = BatchPolicy{Enabled: true, MaxOps: 0, Shards: 0}
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "max operations") || !strings.Contains(err.Error(), "shards") {
		t.Fatalf("got %v, want both problems", err)
	}
	cfg.Batch.Enabled = false
	if err := cfg.Validate(); err != nil {
		t.Fatalf("batching off needs no batch settings: %v", err)
	}
}

// ctxStorage hands the context of each Write to the test and waits for a
// token on proceed.
type ctxStorage struct {
	ports.Storage
	entered chan context.Context
	proceed chan struct{}
}

func (s *ctxStorage) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	s.entered <- ctx
	<-s.proceed
	return s.Storage.Write(ctx, ops)
}

// The storage calls of a batch of several callers end only when every
// caller's context ended (the leader's included), not when the first did.
func TestBatchContextEndsWithItsLastCaller(t *testing.T) {
	st := &ctxStorage{Storage: memory.New(), entered: make(chan context.Context), proceed: make(chan struct{})}
	s := oneShardService(t, st)
	queued := make(chan struct{})
	s.writes[0].onQueued = func() { queued <- struct{}{} }
	var wg sync.WaitGroup
	write := func(ctx context.Context, k string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Write(ctx, []domain.Mutation{listPut(k, k)}, WaitUntilApplied); err != nil {
				t.Error(err)
			}
		}()
	}
	write(context.Background(), "first")
	first := <-st.entered
	ctxs := make([]context.Context, 3)
	cancels := make([]context.CancelFunc, 3)
	for i := range ctxs {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
		write(ctxs[i], fmt.Sprint("k", i))
		<-queued
	}
	st.proceed <- struct{}{}
	batch := <-st.entered // the three callers' batch; the first queued leads it
	if batch == first || batch.Err() != nil {
		t.Fatalf("batch context %v (err %v)", batch, batch.Err())
	}
	bc, ok := batch.(*batchCtx)
	if !ok {
		t.Fatalf("batch context is a %T", batch)
	}
	cancels[1]() // a carried caller
	cancels[0]() // the leader
	// Both are counted out:
	for guard := time.Now().Add(10 * time.Second); bc.left.Load() != 1; runtime.Gosched() {
		if time.Now().After(guard) {
			t.Fatalf("%d callers counted as waiting after two of three left", bc.left.Load())
		}
	}
	if batch.Err() != nil {
		t.Fatal("the batch's context ended while a caller still waits for it")
	}
	cancels[2]()
	select {
	case <-batch.Done():
	case <-time.After(10 * time.Second): // a failure guard, not synchronisation
		t.Fatal("the batch's context did not end after every caller's did")
	}
	st.proceed <- struct{}{}
	wg.Wait()
}
