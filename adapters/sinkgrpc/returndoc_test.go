package sinkgrpc

import (
	"context"
	"slices"
	"sync"
	"testing"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

func mergeOp(intent string, returnDoc bool, key string) *sinkv1.WriteOperation {
	return &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{
		Address: keyAddr(), Profile: "counter", Intent: jsonDoc(intent), ReturnDocument: returnDoc, IdempotencyKey: key}}}
}

// return_document: a put gets its document back, a merge the record's
// state right after its own merge (also when merges of one request fold
// into one write), and only those that asked.
func TestWritesReturnTheDocumentWritten(t *testing.T) {
	srv, _ := keyServer(t)
	ctx := context.Background()
	put := func(doc string, returnDoc bool) *sinkv1.WriteResult {
		t.Helper()
		w, err := srv.Write(ctx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{
			Address: keyAddr(), Document: jsonDoc(doc), ReturnDocument: returnDoc}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return w.Results[0]
	}
	if r := put(`"ab"`, true); r.GetStatus() != sinkv1.OperationStatus_OPERATION_STATUS_APPLIED || string(r.GetDocument().GetData()) != `"ab"` || r.GetDocument().GetContentType() != "application/json" {
		t.Fatalf("put with return_document: %v", r)
	}
	if r := put(`"a"`, false); r.GetDocument() != nil {
		t.Fatalf("put without return_document carries %v", r.GetDocument())
	}
	// Three merges of one record in one request: the counter grows the
	// string by the intent's 3 bytes each time (from `"a"`, 3 bytes).
	w, err := srv.Write(ctx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{
		mergeOp(`"m"`, true, ""), mergeOp(`"m"`, false, ""), mergeOp(`"m"`, true, ""),
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []int{6, -1, 12} // -1: not asked
	for i, r := range w.Results {
		if r.GetStatus() != sinkv1.OperationStatus_OPERATION_STATUS_APPLIED {
			t.Fatalf("merge %d: %v", i, r)
		}
		if want[i] < 0 {
			if r.GetDocument() != nil {
				t.Fatalf("merge %d did not ask for its document but got %q", i, r.GetDocument().GetData())
			}
			continue
		}
		if got := len(r.GetDocument().GetData()); got != want[i] {
			t.Fatalf("merge %d returned %q (%d bytes), want the state after its own merge (%d bytes)", i, r.GetDocument().GetData(), got, want[i])
		}
	}
	rd, err := srv.Read(ctx, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: keyAddr()}}})
	if err != nil || len(rd.Results[0].GetDocument().GetData()) != 12 || !slices.Equal(rd.Results[0].GetRevision(), w.Results[2].GetRevision()) {
		t.Fatalf("read after the merges: %v, %v", rd, err)
	}
}

// Concurrent merges of one record, each asking for its document: every
// one gets a different state (the one right after it), and together they
// are every state from the first merge to the last.
func TestConcurrentMergesEachReturnTheirOwnState(t *testing.T) {
	srv, _ := keyServer(t)
	ctx := context.Background()
	const n = 16
	var wg sync.WaitGroup
	lengths := make([]int, n)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := srv.Write(ctx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{mergeOp(`"m"`, true, "")}})
			if err != nil {
				errs <- err
				return
			}
			lengths[i] = len(w.Results[0].GetDocument().GetData())
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	slices.Sort(lengths)
	for i, l := range lengths {
		if l != 3*(i+1) {
			t.Fatalf("returned document sizes %v, want 3, 6, …, %d (one state per merge)", lengths, 3*n)
		}
	}
}

// return_document needs WAIT_UNTIL_APPLIED; a retry answered from the
// record's remembered keys carries no document.
func TestReturnDocumentLimits(t *testing.T) {
	srv, q := keyServer(t)
	ctx := context.Background()
	w, err := srv.Write(ctx, &sinkv1.WriteRequest{Completion: sinkv1.CompletionMode_COMPLETION_MODE_RETURN_AFTER_ACCEPTED,
		Operations: []*sinkv1.WriteOperation{mergeOp(`"m"`, true, ""), mergeOp(`"m"`, false, "")}})
	if err != nil {
		t.Fatal(err)
	}
	if e := w.Results[0].GetError(); e.GetReason() != "INVALID_ARGUMENT" || w.Results[0].GetStatus() != sinkv1.OperationStatus_OPERATION_STATUS_FAILED {
		t.Fatalf("async merge with return_document: %v", w.Results[0])
	}
	if w.Results[1].GetStatus() != sinkv1.OperationStatus_OPERATION_STATUS_ACCEPTED || len(q.got) != 1 || q.got[0].ReturnDocument {
		t.Fatalf("the other operation: %v (queued %d)", w.Results[1], len(q.got))
	}
	first, err := srv.Write(ctx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{mergeOp(`"m"`, true, "key-1")}})
	if err != nil || first.Results[0].GetDocument() == nil {
		t.Fatalf("keyed merge: %v, %v", first, err)
	}
	again, err := srv.Write(ctx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{mergeOp(`"m"`, true, "key-1")}})
	if err != nil {
		t.Fatal(err)
	}
	r := again.Results[0]
	if r.GetStatus() != sinkv1.OperationStatus_OPERATION_STATUS_APPLIED || !slices.Equal(r.GetRevision(), first.Results[0].GetRevision()) || r.GetDocument() != nil {
		t.Fatalf("retry with the same key: %v; want APPLIED at the first revision without a document", r)
	}
}
