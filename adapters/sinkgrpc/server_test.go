package sinkgrpc

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/sink-io/sink/domain"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// A batch's results share their allocations (results, documents,
// revisions): each still holds its own operation's outcome, revisions do
// not overlap, and an operation without a revision or document has none.
func TestBatchResponsesKeepEachResultApart(t *testing.T) {
	srv, _ := keyServer(t)
	ctx := t.Context()
	addr := func(k string) *sinkv1.RecordAddress {
		return &sinkv1.RecordAddress{Namespace: "n", Dataset: "d", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: k}}}
	}
	const n = 5
	var ops []*sinkv1.WriteOperation
	for i := range n {
		ops = append(ops, &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{
			Address: addr(fmt.Sprint("k", i)), Document: jsonDoc(fmt.Sprintf(`{"i":%d}`, i))}}})
	}
	// An invalid operation in the middle: no revision.
	ops = append(ops[:2], append([]*sinkv1.WriteOperation{{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{
		Address: addr("bad"), Document: &sinkv1.Document{Data: []byte(`{}`)}}}}}, ops[2:]...)...)
	w, err := srv.Write(ctx, &sinkv1.WriteRequest{Operations: ops})
	if err != nil {
		t.Fatal(err)
	}
	revs := map[string]string{}
	for i, r := range w.GetResults() {
		if int(r.GetIndex()) != i {
			t.Fatalf("result %d has index %d", i, r.GetIndex())
		}
		if i == 2 {
			if r.GetStatus() != sinkv1.OperationStatus_OPERATION_STATUS_FAILED || r.GetError() == nil || r.Revision != nil {
				t.Fatalf("the invalid put: %v", r)
			}
			continue
		}
		if r.GetStatus() != sinkv1.OperationStatus_OPERATION_STATUS_APPLIED || len(r.GetRevision()) == 0 || cap(r.GetRevision()) != len(r.GetRevision()) {
			t.Fatalf("put %d: %v (revision capacity %d)", i, r, cap(r.GetRevision()))
		}
		revs[ops[i].GetPut().GetAddress().GetKey().GetString_()] = string(r.GetRevision())
	}
	if len(revs) != n {
		t.Fatalf("%d distinct records written, want %d", len(revs), n)
	}
	var reads []*sinkv1.ReadOperation
	for i := range n {
		reads = append(reads, &sinkv1.ReadOperation{Address: addr(fmt.Sprint("k", n-1-i))})
		if i == 1 {
			reads = append(reads, &sinkv1.ReadOperation{Address: addr("missing")})
		}
	}
	got, err := srv.Read(ctx, &sinkv1.ReadRequest{Operations: reads})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, r := range got.GetResults() {
		k := reads[i].GetAddress().GetKey().GetString_()
		if k == "missing" {
			if r.GetStatus() != sinkv1.OperationStatus_OPERATION_STATUS_NOT_FOUND || r.Document != nil || r.Revision != nil {
				t.Fatalf("the missing record: %v", r)
			}
			continue
		}
		var want int
		fmt.Sscanf(k, "k%d", &want)
		if r.GetStatus() != sinkv1.OperationStatus_OPERATION_STATUS_FOUND || string(r.GetDocument().GetData()) != fmt.Sprintf(`{"i":%d}`, want) ||
			string(r.GetRevision()) != revs[k] || cap(r.GetRevision()) != len(r.GetRevision()) {
			t.Fatalf("read %d (%s): %v, want revision %q", i, k, r, revs[k])
		}
		if seen[string(r.GetRevision())] {
			t.Fatalf("revision %q twice", r.GetRevision())
		}
		seen[string(r.GetRevision())] = true
		// The response marshals as if every result had its own storage.
		if _, err := proto.Marshal(r); err != nil {
			t.Fatal(err)
		}
	}
	del, err := srv.Delete(ctx, &sinkv1.DeleteRequest{Operations: []*sinkv1.DeleteOperation{{Address: addr("k0")}, {Address: addr("missing")}, {Address: addr("k1")}}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range del.GetResults() {
		if int(r.GetIndex()) != i || r.GetStatus() != sinkv1.OperationStatus_OPERATION_STATUS_APPLIED && !(i == 1 && r.GetStatus() == sinkv1.OperationStatus_OPERATION_STATUS_NOT_FOUND) {
			t.Fatalf("delete %d: %v", i, r)
		}
	}
}

// A single operation's response holds its result and revision in one
// allocation; a revision longer than inlineRevision still comes out whole.
func TestSingleResponsesTakeOneAllocation(t *testing.T) {
	for _, rev := range []domain.Revision{"17", domain.Revision(strings.Repeat("r", inlineRevision)), domain.Revision(strings.Repeat("x", inlineRevision+9))} {
		out, rs, revs := newWriteResponse(1, len(rev))
		rs[0].Revision, _ = appendRevision(revs, rev)
		out.Results[0] = &rs[0]
		if got := string(out.GetResults()[0].GetRevision()); got != string(rev) {
			t.Fatalf("write revision %q, want %q", got, rev)
		}
		rout, rrs, docs, rrevs := newReadResponse(1, 1, len(rev))
		rrs[0].Revision, _ = appendRevision(rrevs, rev)
		rrs[0].Document = &docs[0]
		rout.Results[0] = &rrs[0]
		if got := string(rout.GetResults()[0].GetRevision()); got != string(rev) || len(docs) != 1 {
			t.Fatalf("read revision %q (%d documents), want %q", got, len(docs), rev)
		}
	}
	want := 1.0
	if n := testing.AllocsPerRun(100, func() { newWriteResponse(1, inlineRevision) }); n != want {
		t.Errorf("a single write's response: %v allocations, want %v", n, want)
	}
	if n := testing.AllocsPerRun(100, func() { newReadResponse(1, 1, inlineRevision) }); n != want {
		t.Errorf("a single read's response: %v allocations, want %v", n, want)
	}
	if n := testing.AllocsPerRun(100, func() { newDeleteResponse(1) }); n != want {
		t.Errorf("a single delete's response: %v allocations, want %v", n, want)
	}
}

// A batch's mutation slice goes back to the pool emptied (it keeps no
// request's addresses or documents), and only up to maxPooledOps;
// batches of different sizes and contents written one after the other,
// each reusing the last one's slice, store exactly their own documents.
func TestBatchMutationSlicesArePooledEmptied(t *testing.T) {
	muts := make([]domain.Mutation, 3, 8)
	for i := range muts {
		muts[i] = domain.Mutation{Kind: domain.MutationPut, Address: domain.Address{Namespace: "n", Dataset: "d", Key: domain.StringKey("k")}, Document: domain.Document{Data: []byte(`{}`)}}
	}
	mutationBufs.put(muts)
	for i, m := range muts {
		if m.Kind != 0 || m.Address.Namespace != "" || m.Document.Data != nil {
			t.Fatalf("pooled mutation %d still holds %+v", i, m)
		}
	}
	big := make([]domain.Mutation, 1, maxPooledOps+1)
	big[0].Address.Namespace = "kept"
	mutationBufs.put(big)
	if big[0].Address.Namespace != "kept" {
		t.Fatal("a slice above maxPooledOps was emptied: it must be left to the collector, not pooled")
	}

	srv, _ := keyServer(t)
	ctx := t.Context()
	addr := func(k string) *sinkv1.RecordAddress {
		return &sinkv1.RecordAddress{Namespace: "n", Dataset: "d", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: k}}}
	}
	for round, n := range []int{5, 2, 7, 3} {
		var ops []*sinkv1.WriteOperation
		var reads []*sinkv1.ReadOperation
		for i := range n {
			k := fmt.Sprint("r", i)
			ops = append(ops, &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{
				Address: addr(k), Document: jsonDoc(fmt.Sprintf(`{"round":%d,"i":%d}`, round, i))}}})
			reads = append(reads, &sinkv1.ReadOperation{Address: addr(k)})
		}
		w, err := srv.Write(ctx, &sinkv1.WriteRequest{Operations: ops})
		if err != nil || len(w.GetResults()) != n {
			t.Fatalf("round %d: %v %v", round, w, err)
		}
		r, err := srv.Read(ctx, &sinkv1.ReadRequest{Operations: reads})
		if err != nil {
			t.Fatal(err)
		}
		for i, res := range r.GetResults() {
			if want := fmt.Sprintf(`{"round":%d,"i":%d}`, round, i); string(res.GetDocument().GetData()) != want {
				t.Fatalf("round %d, record %d: %q, want %q", round, i, res.GetDocument().GetData(), want)
			}
		}
	}
}

// A batch read's address slice goes back to the pool emptied (it keeps no
// request's names or keys), and only up to maxPooledOps; responses
// built before the addresses and the application's results were reused
// keep their own documents, revisions and errors.
func TestBatchReadAddressesArePooledEmptied(t *testing.T) {
	var pooled [][]domain.Address
	addressBufs.released = func(a []domain.Address) { pooled = append(pooled, a) }
	t.Cleanup(func() { addressBufs.released = nil })
	srv, _ := keyServer(t)
	ctx := t.Context()
	addr := func(k string) *sinkv1.RecordAddress {
		return &sinkv1.RecordAddress{Namespace: "n", Dataset: "d", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: k}}}
	}
	type kept struct {
		resp *sinkv1.ReadResponse
		want []string
	}
	var earlier []kept
	for round, n := range []int{4, 2, 6} {
		var ops []*sinkv1.WriteOperation
		var reads []*sinkv1.ReadOperation
		var want []string
		for i := range n {
			k := fmt.Sprint("a", i)
			doc := fmt.Sprintf(`{"round":%d,"i":%d}`, round, i)
			ops = append(ops, &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{Address: addr(k), Document: jsonDoc(doc)}}})
			reads = append(reads, &sinkv1.ReadOperation{Address: addr(k)})
			want = append(want, doc)
		}
		reads = append(reads, &sinkv1.ReadOperation{Address: &sinkv1.RecordAddress{Namespace: "n"}}) // invalid: an error
		want = append(want, "")
		if _, err := srv.Write(ctx, &sinkv1.WriteRequest{Operations: ops}); err != nil {
			t.Fatal(err)
		}
		before := len(pooled)
		r, err := srv.Read(ctx, &sinkv1.ReadRequest{Operations: reads})
		if err != nil {
			t.Fatal(err)
		}
		if len(pooled) != before+1 {
			t.Fatalf("round %d: %d address slices pooled, want 1", round, len(pooled)-before)
		}
		for i, a := range pooled[len(pooled)-1] {
			if a != (domain.Address{}) {
				t.Fatalf("round %d: pooled address %d still holds %+v", round, i, a)
			}
		}
		earlier = append(earlier, kept{r, want})
		for e, k := range earlier {
			for i, res := range k.resp.GetResults() {
				if i == len(k.want)-1 {
					if res.GetError() == nil || res.GetDocument() != nil {
						t.Fatalf("round %d, response %d: the invalid read: %v", round, e, res)
					}
					continue
				}
				if string(res.GetDocument().GetData()) != k.want[i] || len(res.GetRevision()) == 0 || res.GetError() != nil {
					t.Fatalf("round %d, response %d, read %d: %v, want %s", round, e, i, res, k.want[i])
				}
			}
		}
	}
	big := make([]domain.Address, 1, maxPooledOps+1)
	big[0].Namespace = "kept"
	before := len(pooled)
	addressBufs.put(big)
	if len(pooled) != before || big[0].Namespace != "kept" {
		t.Fatal("a slice above maxPooledOps was pooled: it must be left to the collector")
	}
}
