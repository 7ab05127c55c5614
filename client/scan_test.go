package client_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/client"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/sinktest"
)

// flakyScans fails the scan call number failAt (counting from 1) with a
// retryable UNAVAILABLE, once.
type flakyScans struct {
	*memory.Store
	calls  atomic.Int32
	failAt int32
}

func (f *flakyScans) Scan(ctx context.Context, q ports.ScanQuery) (ports.ScanResult, error) {
	if f.calls.Add(1) == f.failAt {
		return ports.ScanResult{}, domain.Errorf(domain.CodeUnavailable, "injected: the database went away")
	}
	return f.Store.Scan(ctx, q)
}

type item struct {
	N    int    `json:"n"`
	Kind string `json:"kind"`
}

// Scan follows the server's cursors page after page, in key order, and
// goes on from the last page after a retryable failure, returning every
// record once; Where and WithLimit select; Count counts the same.
func TestScanFollowsCursorsAndResumes(t *testing.T) {
	// The second storage scan is the server's first read ahead (after a
	// first page of 4): it fails while the client reads that page.
	st := &flakyScans{Store: memory.New(), failAt: 2}
	c := sinktest.New(t, sinktest.WithStorage(st))
	ctx := context.Background()
	ds := c.Dataset("shop", "items")
	for i := range 25 {
		kind := "odd"
		if i%2 == 0 {
			kind = "even"
		}
		if _, err := ds.Put(ctx, client.StringKey(fmt.Sprintf("k%02d", i)), item{N: i, Kind: kind}); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	for rec, err := range ds.Scan(ctx, client.WithPageSize(4)) {
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		var it item
		if err := rec.Decode(&it); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("k%02d", it.N); rec.Key != client.StringKey(want) {
			t.Fatalf("record %v holds n=%d", rec.Key, it.N)
		}
		keys = append(keys, rec.Key.String())
	}
	if len(keys) != 25 || keys[0] != `string:"k00"` || keys[24] != `string:"k24"` {
		t.Fatalf("scanned %d keys %v, want k00..k24 once each, in order", len(keys), keys)
	}
	if st.calls.Load() <= st.failAt {
		t.Fatalf("%d storage scans for 25 records in pages of 4, the failure injected at scan %d; the scan did not resume", st.calls.Load(), st.failAt)
	}
	n := 0
	for rec, err := range ds.Scan(ctx, client.Where(`doc.kind == "even"`), client.WithLimit(5), client.Descending()) {
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 && rec.Key != client.StringKey("k24") {
			t.Fatalf("the descending scan starts at %v", rec.Key)
		}
		n++
	}
	if n != 5 {
		t.Fatalf("a limit of 5 returned %d", n)
	}
	if got, exact, err := ds.Count(ctx, client.Where(`doc.n >= 20`)); err != nil || got != 5 || !exact {
		t.Fatalf("count: %d %v %v, want 5 exact", got, exact, err)
	}
	for _, err := range ds.Scan(ctx, client.Where(`doc.n >`)) {
		if err == nil || !errorsIsInvalid(err) {
			t.Fatalf("a malformed expression: %v, want INVALID_ARGUMENT", err)
		}
	}
}

func errorsIsInvalid(err error) bool {
	e, ok := err.(*client.OperationError)
	return ok && e.Reason == "INVALID_ARGUMENT" && !e.Retryable()
}
