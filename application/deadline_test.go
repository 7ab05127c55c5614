package application

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// counted counts the storage calls that reach it.
type counted struct {
	ports.Storage
	mu           sync.Mutex
	reads, write int
}

func (c *counted) Read(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	return c.Storage.Read(ctx, addrs)
}

func (c *counted) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	c.mu.Lock()
	c.write++
	c.mu.Unlock()
	return c.Storage.Write(ctx, ops)
}

// A request whose deadline has passed, or leaves less than MinDeadline,
// is refused whole with DEADLINE_EXCEEDED before any storage call.
func TestRequestsWhoseDeadlineCannotBeMetAreRefused(t *testing.T) {
	st := &counted{Storage: memory.New()}
	cfg := DefaultConfig()
	cfg.MinDeadlineSetting = "SINK_MIN_DEADLINE"
	s, err := NewService(cfg, st, []ports.MergeProfile{listProfile{}})
	if err != nil {
		t.Fatal(err)
	}
	passed, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	short, cancel2 := context.WithTimeout(context.Background(), cfg.MinDeadline/2)
	defer cancel2()
	calls := map[string]func(ctx context.Context) error{
		"write": func(ctx context.Context) error {
			_, err := s.Write(ctx, []domain.Mutation{listPut("k", "x")}, WaitUntilApplied)
			return err
		},
		"delete": func(ctx context.Context) error {
			_, err := s.Delete(ctx, []domain.Mutation{{Kind: domain.MutationDelete, Address: listAddr("k")}}, WaitUntilApplied)
			return err
		},
		"read": func(ctx context.Context) error {
			_, err := s.Read(ctx, []domain.Address{listAddr("k")})
			return err
		},
	}
	for name, call := range calls {
		for _, c := range []struct {
			what string
			ctx  context.Context
			msg  string
		}{
			{"deadline passed", passed, "the request's deadline had passed when it arrived; nothing was done"},
			{"deadline below the floor", short, "less than the 1ms a request needs (SINK_MIN_DEADLINE); nothing was done"},
		} {
			err := call(c.ctx)
			e := domain.AsError(err)
			if err == nil || e.Code != domain.CodeDeadlineExceeded || !e.Retryable || !strings.Contains(e.Error(), c.msg) {
				t.Errorf("%s, %s: %v (code %v); want a retryable DEADLINE_EXCEEDED saying %q", name, c.what, err, domain.CodeOf(err), c.msg)
			}
		}
	}
	if st.reads != 0 || st.write != 0 {
		t.Fatalf("refused requests reached storage: %d reads, %d writes", st.reads, st.write)
	}
	// With time left, the same requests run.
	ok, cancel3 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel3()
	for name, call := range calls {
		if err := call(ok); err != nil {
			t.Errorf("%s with a minute left: %v", name, err)
		}
	}
	if st.reads == 0 || st.write == 0 {
		t.Fatalf("the requests with time left did not reach storage: %d reads, %d writes", st.reads, st.write)
	}
}

func TestMinDeadlineIsValidated(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MinDeadline = -time.Millisecond
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "min deadline must not be negative") {
		t.Fatalf("%v", err)
	}
}

// A caller whose deadline passes while it waits behind a batch at storage
// leaves at once, with DEADLINE_EXCEEDED (nothing written: a retry is
// safe), and its mutation is never written.
func TestDeadlineInTheQueueLeavesAndWritesNothing(t *testing.T) {
	c := newContention(t, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan []WriteResult, 1)
	go func() {
		res, err := c.s.Write(ctx, []domain.Mutation{listPut("late", "x")}, WaitUntilApplied)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-c.queued
	var res []WriteResult
	select {
	case res = <-done: // while the batch before it is still at storage
	case <-time.After(10 * time.Second): // a failure guard
		t.Fatal("the caller did not leave the queue at its deadline")
	}
	e := res[0].Err
	if e == nil || e.Code != domain.CodeDeadlineExceeded || !e.Retryable || !strings.Contains(e.Message, "nothing was written") {
		t.Fatalf("caller whose deadline passed in the queue: %+v", res[0])
	}
	c.release()
	r, err := c.s.Read(context.Background(), []domain.Address{listAddr("late")})
	if err != nil || r[0].Status != StatusNotFound {
		t.Fatalf("the mutation of a caller that left the queue was written: %v %+v", err, r)
	}
	for _, w := range c.st.writes {
		for _, op := range w {
			if op.Address.Key.String() == listAddr("late").Key.String() {
				t.Fatalf("storage received the mutation of a caller that left the queue: %+v", op)
			}
		}
	}
}

// batchAt starts a service whose storage holds every write call until
// told to proceed, with one write at storage, and queues one Write per
// call of write (in that order) behind it.
type batchAt struct {
	s      *Service
	st     *ctxStorage
	queued chan struct{}
	wg     sync.WaitGroup
}

func newBatchAt(t *testing.T) *batchAt {
	t.Helper()
	b := &batchAt{st: &ctxStorage{Storage: memory.New(), entered: make(chan context.Context), proceed: make(chan struct{})}, queued: make(chan struct{})}
	s := oneShardService(t, b.st)
	b.s = s
	s.writes[0].onQueued = func() { b.queued <- struct{}{} }
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if _, err := s.Write(context.Background(), []domain.Mutation{listPut("first", "x")}, WaitUntilApplied); err != nil {
			t.Error(err)
		}
	}()
	<-b.st.entered
	return b
}

// A synchronous caller carried in another caller's batch leaves at its
// deadline while the batch is still at storage, its write reported with
// an unknown outcome (retryable: an upsert); the batch goes on, and its
// leader gets its own result.
func TestCarriedCallerLeavesAtItsDeadline(t *testing.T) {
	b := newBatchAt(t)
	lead := make(chan []WriteResult, 1)
	go func() {
		res, _ := b.s.Write(context.Background(), []domain.Mutation{listPut("lead", "x")}, WaitUntilApplied)
		lead <- res
	}()
	<-b.queued
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	carried := make(chan []WriteResult, 1)
	go func() {
		res, _ := b.s.Write(ctx, []domain.Mutation{listPut("carried", "y")}, WaitUntilApplied)
		carried <- res
	}()
	<-b.queued
	b.st.proceed <- struct{}{} // the first write returns
	<-b.st.entered             // the batch of the two queued callers is at storage
	var res []WriteResult
	select {
	case res = <-carried:
	case <-time.After(10 * time.Second): // a failure guard
		t.Fatal("the carried caller waited for the batch past its deadline")
	}
	if e := res[0].Err; e == nil || e.Code != domain.CodeOutcomeUnknown || !e.Retryable || !strings.Contains(e.Message, "it may have been applied") {
		t.Fatalf("carried caller past its deadline: %+v", res[0])
	}
	b.st.proceed <- struct{}{}
	if r := <-lead; r[0].Status != StatusApplied {
		t.Fatalf("the batch's leader: %+v", r[0])
	}
	b.wg.Wait()
	// The batch applied the carried write after its caller left (so the
	// unknown outcome was the honest answer).
	r, err := b.s.Read(context.Background(), []domain.Address{listAddr("carried")})
	if err != nil || r[0].Status != StatusFound {
		t.Fatalf("the carried write: %v %+v", err, r)
	}
}

// A worker's batch of queued mutations carried in another caller's batch
// stays until that batch ends, even past its deadline: the worker must
// know each mutation's outcome (a mutation reported unknown while it is
// still being written could be dead-lettered and then applied).
func TestCarriedWorkerBatchStaysToTheEnd(t *testing.T) {
	b := newBatchAt(t)
	go func() {
		_, _ = b.s.Write(context.Background(), []domain.Mutation{listPut("lead", "x")}, WaitUntilApplied)
	}()
	<-b.queued
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	m := listPut("queued", "y")
	m.ID, m.Source = "w1", domain.SourcePosition{Partition: 0, Offset: 1}
	out := make(chan []ports.ApplyOutcome, 1)
	go func() { out <- b.s.ApplyMutations(ctx, []domain.Mutation{m}) }()
	<-b.queued
	b.st.proceed <- struct{}{}
	bc := (<-b.st.entered).(*batchCtx)
	<-ctx.Done()
	// The worker's caller counted itself out of the batch; had it left,
	// it would have by now.
	for guard := time.Now().Add(10 * time.Second); bc.left.Load() != 1; runtime.Gosched() {
		if time.Now().After(guard) {
			t.Fatalf("%d callers counted in the batch", bc.left.Load())
		}
	}
	select {
	case o := <-out:
		t.Fatalf("the worker's batch returned before the batch carrying it ended: %+v", o)
	default:
	}
	b.st.proceed <- struct{}{}
	if o := <-out; o[0].Err != nil {
		t.Fatalf("the worker's mutation, applied by the batch: %+v", o[0])
	}
	b.wg.Wait()
}

// The request that leads a batch of several leaves at its own deadline
// too, while the batch is still at storage: its write is reported with an
// unknown outcome, and the batch goes on for the request it carries, which
// gets its result (the batch's storage calls do not end with the
// leader's context).
func TestBatchLeaderLeavesAtItsDeadline(t *testing.T) {
	b := newBatchAt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	lead := make(chan []WriteResult, 1)
	go func() {
		res, _ := b.s.Write(ctx, []domain.Mutation{listPut("lead", "x")}, WaitUntilApplied)
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
	batch := <-b.st.entered    // the batch of the two queued callers is at storage
	var res []WriteResult
	select {
	case res = <-lead:
	case <-time.After(10 * time.Second): // a failure guard
		t.Fatal("the batch's leader waited for the batch past its deadline")
	}
	if e := res[0].Err; e == nil || e.Code != domain.CodeOutcomeUnknown || !e.Retryable || !strings.Contains(e.Message, "it may have been applied") {
		t.Fatalf("leader past its deadline: %+v", res[0])
	}
	if batch.Err() != nil {
		t.Fatal("the batch's context ended with its leader's, while another request waits for it")
	}
	b.st.proceed <- struct{}{}
	if r := <-carried; r[0].Status != StatusApplied {
		t.Fatalf("the carried request: %+v", r[0])
	}
	b.wg.Wait()
	// The batch applied the leader's write after it left.
	r, err := b.s.Read(context.Background(), []domain.Address{listAddr("lead")})
	if err != nil || r[0].Status != StatusFound {
		t.Fatalf("the leader's write: %v %+v", err, r)
	}
}

// A worker's batch of queued mutations that leads a batch of several stays
// to its end, even past its deadline (see TestCarriedWorkerBatchStaysToTheEnd).
func TestLeadingWorkerBatchStaysToTheEnd(t *testing.T) {
	b := newBatchAt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	m := listPut("queued", "y")
	m.ID, m.Source = "w1", domain.SourcePosition{Log: "L", Partition: 0, Offset: 1}
	out := make(chan []ports.ApplyOutcome, 1)
	go func() { out <- b.s.ApplyMutations(ctx, []domain.Mutation{m}) }()
	<-b.queued
	carried := make(chan []WriteResult, 1)
	go func() {
		res, _ := b.s.Write(context.Background(), []domain.Mutation{listPut("carried", "y")}, WaitUntilApplied)
		carried <- res
	}()
	<-b.queued
	b.st.proceed <- struct{}{}
	<-b.st.entered
	<-ctx.Done()
	select {
	case o := <-out:
		t.Fatalf("the worker's batch returned before the batch it leads ended: %+v", o)
	default:
	}
	b.st.proceed <- struct{}{}
	if o := <-out; o[0].Err != nil {
		t.Fatalf("the worker's mutation, applied by the batch: %+v", o[0])
	}
	if r := <-carried; r[0].Status != StatusApplied {
		t.Fatalf("the carried request: %+v", r[0])
	}
	b.wg.Wait()
}
