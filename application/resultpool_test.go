package application

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

var poisonWrite = WriteResult{Status: StatusFailed, MutationID: "poisoned"}

// poisonReleasedWrites makes every results slice ReleaseWriteResults pools
// from now to the end of the test poisoned, and returns those slices.
func poisonReleasedWrites(t *testing.T) func() [][]WriteResult {
	t.Helper()
	var mu sync.Mutex
	var got [][]WriteResult
	writeResults.released = func(r []WriteResult) {
		for i := range r {
			r[i] = poisonWrite
		}
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
	}
	t.Cleanup(func() { writeResults.released = nil })
	return func() [][]WriteResult {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// A caller that leaves the write batch carrying its job at its deadline
// (the batch's leader, or a caller it carries) may give back the results
// it got at once: the batch, which goes on with its mutations (here the
// second wave writes its second put after it left), never writes into the
// slice given back. Were it written, the poison put in it when it was
// pooled would be overwritten (and another request's results with it).
func TestLeftCallersReleasedResultsAreNotWrittenByItsBatch(t *testing.T) {
	for _, leader := range []bool{true, false} {
		name := "carried"
		if leader {
			name = "leader"
		}
		t.Run(name, func(t *testing.T) {
			pooled := poisonReleasedWrites(t)
			b := newBatchAt(t)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			leaving := func() {
				res, _ := b.s.Write(ctx, []domain.Mutation{listPut("left", "1"), listPut("left", "2")}, WaitUntilApplied)
				if e := res[1].Err; e == nil || e.Code != domain.CodeOutcomeUnknown {
					t.Errorf("caller past its deadline: %+v", res[1])
				}
				b.s.ReleaseWriteResults(res)
			}
			staying := func() {
				res, _ := b.s.Write(context.Background(), []domain.Mutation{listPut("stays", "y"), listPut("stays2", "y")}, WaitUntilApplied)
				if res[0].Status != StatusApplied || res[1].Status != StatusApplied {
					t.Errorf("the caller that stayed: %+v", res)
				}
			}
			first, second := leaving, staying
			if !leader {
				first, second = staying, leaving
			}
			left := make(chan struct{})
			stayed := make(chan struct{})
			run := func(f func(), c chan struct{}) {
				go func() { f(); close(c) }()
			}
			if leader {
				run(first, left)
				<-b.queued
				run(second, stayed)
			} else {
				run(first, stayed)
				<-b.queued
				run(second, left)
			}
			<-b.queued
			b.st.proceed <- struct{}{} // the first write returns
			<-b.st.entered             // the batch's first wave is at storage
			select {
			case <-left:
			case <-time.After(10 * time.Second): // a failure guard
				t.Fatal("the caller waited for the batch past its deadline")
			}
			if n := len(pooled()); n != 1 {
				t.Fatalf("%d results slices pooled, want the leaving caller's", n)
			}
			b.st.proceed <- struct{}{} // the first wave returns
			<-b.st.entered             // the second: the left caller's second put
			b.st.proceed <- struct{}{}
			<-stayed
			b.wg.Wait()
			r, err := b.s.Read(context.Background(), []domain.Address{listAddr("left")})
			if err != nil {
				t.Fatal(err)
			}
			var d listDoc
			if r[0].Status != StatusFound || json.Unmarshal(r[0].Record.Document.Data, &d) != nil || !slices.Equal(d.L, []string{"2"}) {
				t.Fatalf("record left after its batch: %+v, want the second put", r[0])
			}
			got := pooled()
			for i, res := range got[0] {
				if res != poisonWrite {
					t.Fatalf("the batch wrote into results given back by its caller that left: [%d] %+v", i, res)
				}
			}
		})
	}
}

// A reader that leaves the read batch carrying it at its deadline may give
// back its results at once: the batch writes each reader's own out, never
// its results (Read copies out into them), so the poison put in the
// slice when it was pooled stays.
func TestLeftReadersReleasedResultsAreNotWrittenByItsBatch(t *testing.T) {
	var pooled [][]ReadResult
	poison := ReadResult{Status: StatusFailed, Record: domain.Record{Revision: "poisoned"}}
	readResults.released = func(r []ReadResult) {
		for i := range r {
			r[i] = poison
		}
		pooled = append(pooled, r)
	}
	t.Cleanup(func() { readResults.released = nil })
	st := &readCtxStorage{Storage: memory.New(), entered: make(chan context.Context), proceed: make(chan struct{})}
	s := oneShardService(t, st)
	_, carried := leftReaderRun(t, s, st, []string{"a", "b"}, []string{"c", "d"}, func(r []ReadResult) {
		if r[0].Err == nil {
			t.Errorf("reader past its deadline: %+v", r[0])
		}
		s.ReleaseReadResults(r)
	})
	if carried[0].Status != StatusNotFound || carried[1].Status != StatusNotFound {
		t.Fatalf("the carried reader: %+v", carried)
	}
	if len(pooled) != 1 {
		t.Fatalf("%d results slices pooled, want the leaving reader's", len(pooled))
	}
	for i, r := range pooled[0] {
		if r.Status != poison.Status || r.Record.Revision != poison.Record.Revision || r.Record.Document.Data != nil || r.Err != nil {
			t.Fatalf("the batch wrote into results given back by its reader that left: [%d] %+v", i, r)
		}
	}
}

// Results given back are emptied before they are pooled (no documents,
// revisions or errors kept alive) and reused; a single operation's (in
// its request's allocation) and slices above maxPooledOps are not pooled.
func TestReleasedResultsAreEmptiedAndBounded(t *testing.T) {
	var got [][]WriteResult
	writeResults.released = func(r []WriteResult) { got = append(got, r) }
	t.Cleanup(func() { writeResults.released = nil })
	s, err := NewService(DefaultConfig(), memory.New(), []ports.MergeProfile{listProfile{}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Write(context.Background(), []domain.Mutation{listPut("a", "x"), listPut("b", "x")}, WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != StatusApplied || r.Revision == "" {
			t.Fatalf("write: %+v", r)
		}
	}
	s.ReleaseWriteResults(res)
	if len(got) != 1 || &got[0][0] != &res[0] {
		t.Fatalf("%d slices pooled, want the results given back", len(got))
	}
	for i, r := range got[0] {
		if r != (WriteResult{}) {
			t.Fatalf("pooled results keep [%d]: %+v", i, r)
		}
	}
	one, err := s.Write(context.Background(), []domain.Mutation{listPut("c", "x")}, WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	s.ReleaseWriteResults(one)
	s.ReleaseWriteResults(nil)
	s.ReleaseWriteResults(make([]WriteResult, maxPooledOps+1))
	if len(got) != 1 {
		t.Fatalf("%d slices pooled, want a single operation's and one above maxPooledOps not pooled", len(got))
	}
	var reads [][]ReadResult
	readResults.released = func(r []ReadResult) { reads = append(reads, r) }
	t.Cleanup(func() { readResults.released = nil })
	rr, err := s.Read(context.Background(), []domain.Address{listAddr("a"), listAddr("b")})
	if err != nil {
		t.Fatal(err)
	}
	if rr[0].Status != StatusFound || len(rr[0].Record.Document.Data) == 0 {
		t.Fatalf("read: %+v", rr[0])
	}
	s.ReleaseReadResults(rr)
	if len(reads) != 1 {
		t.Fatalf("%d read results pooled", len(reads))
	}
	for i, r := range reads[0] {
		if r.Status != 0 || r.Record.Document.Data != nil || r.Record.Revision != "" || r.Err != nil {
			t.Fatalf("pooled read results keep [%d]: %+v", i, r)
		}
	}
}

// TestGivingResultsBackAllocatesNothingForOneOperation: the gRPC adapter
// gives every request's results back, a single operation's too (which
// are not pooled: they live in the request's own allocation), so giving
// them back must not allocate; a batch's costs at most the pool's one
// pointer.
func TestGivingResultsBackAllocatesNothingForOneOperation(t *testing.T) {
	var s Service
	one := make([]WriteResult, 1)
	oneRead := make([]ReadResult, 1)
	if n := testing.AllocsPerRun(100, func() { s.ReleaseWriteResults(one) }); n != 0 {
		t.Errorf("giving back a single write's results: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { s.ReleaseReadResults(oneRead) }); n != 0 {
		t.Errorf("giving back a single read's results: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { s.ReleaseWriteResults(writeResults.get(8)) }); n > 1 {
		t.Errorf("taking and giving back a batch's results: %v allocations, want at most 1", n)
	}
}
