package memory_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
)

type counterDoc struct {
	N       int    `json:"n"`
	Payload []byte `json:"payload,omitempty"`
}

func TestConformance(t *testing.T) {
	storagetest.Run(t, storagetest.Fixtures{
		// Every case gets a store of its own, so one namespace will do.
		NewStorage: func(*testing.T) ports.Storage { return memory.New() },
		// The memory store cannot fail by itself: Unreachable stands in
		// for an outage.
		Broken:    func(_ *testing.T, s ports.Storage) ports.Storage { return storagetest.Unreachable(s) },
		Store:     "primary",
		Namespace: func(testing.TB) string { return "test" },
		NewDocument: func(t testing.TB, _ domain.Address, n int, payload []byte) domain.Document {
			b, err := json.Marshal(counterDoc{N: n, Payload: payload})
			if err != nil {
				t.Fatal(err)
			}
			return domain.Document{ContentType: domain.ContentTypeJSON, Data: b}
		},
		Counter: func(t testing.TB, d domain.Document) int {
			var c counterDoc
			if err := json.Unmarshal(d.Data, &c); err != nil {
				t.Fatalf("decode %q: %v", d.Data, err)
			}
			return c.N
		},
		EmptyDocument: func(testing.TB, domain.Address) domain.Document {
			return domain.Document{ContentType: "application/octet-stream"}
		},
	}, storagetest.Features{
		// Any key, any name, any content type, no size limit.
		LargePayloadBytes: 4 << 20,
	})
}

func TestWritesDoNotAliasCallerBuffers(t *testing.T) {
	s := memory.New()
	a := domain.Address{Store: "p", Namespace: "n", Dataset: "d", Key: domain.StringKey("k")}
	data := []byte(`{"n":1}`)
	s.Write(t.Context(), []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: domain.Document{ContentType: "application/json", Data: data}}})
	data[2] = 'X'
	r := s.Read(t.Context(), []domain.Address{a})[0]
	if string(r.Record.Document.Data) != `{"n":1}` {
		t.Fatalf("stored document changed with the caller's buffer: %q", r.Record.Document.Data)
	}
	if s.Len() != 1 {
		t.Fatalf("Len = %d", s.Len())
	}
}

// A put's document handed over (ports.WriteOp.HandOver) is kept as it is,
// not copied: the store shares the caller's bytes (which the caller, by
// the contract, never changes; this test changes them only to see that
// they are shared) and allocates nothing for the document.
func TestHandedOverDocumentsAreKeptNotCopied(t *testing.T) {
	s := memory.New()
	a := domain.Address{Store: "p", Namespace: "n", Dataset: "d", Key: domain.StringKey("k")}
	data := []byte(`{"n":1}`)
	ops := []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: domain.Document{ContentType: "application/json", Data: data}, HandOver: true}}
	if r := s.Write(t.Context(), ops)[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	data[2] = 'X'
	if r := s.Read(t.Context(), []domain.Address{a})[0]; string(r.Record.Document.Data) != `{"X":1}` {
		t.Fatalf("stored document %q is not the bytes handed over", r.Record.Document.Data)
	}
	// A rewrite allocates its results and revision only, one object fewer
	// than a rewrite that copies (a document above the runtime's 16-byte
	// tiny allocations, which share blocks).
	ops[0].Document.Data = []byte(`{"payload":"` + strings.Repeat("x", 100) + `"}`)
	ctx := t.Context()
	for range 100 { // (revisions below 100 are strings without allocation)
		s.Write(ctx, ops)
	}
	copied := testing.AllocsPerRun(100, func() { ops[0].HandOver = false; s.Write(ctx, ops) })
	kept := testing.AllocsPerRun(100, func() { ops[0].HandOver = true; s.Write(ctx, ops) })
	if kept != copied-1 {
		t.Fatalf("a handed-over rewrite allocates %v objects, a copying one %v: want one fewer", kept, copied)
	}
}

// TestConditionMessagesRenderRevisionsInBase64: a client may send any bytes
// as an expected revision. The mismatch and not-found messages quote
// revisions in base64, so they stay valid UTF-8 (a raw 0xff used to reach
// the gRPC response and fail the whole call) and show the form clients see.
func TestConditionMessagesRenderRevisionsInBase64(t *testing.T) {
	s := memory.New()
	a := domain.Address{Store: "p", Namespace: "n", Dataset: "d", Key: domain.BytesKey([]byte{0xfe, 0xff})}
	doc := domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"n":1}`)}
	w := s.Write(t.Context(), []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: doc}})[0]
	if w.Err != nil {
		t.Fatal(w.Err)
	}
	missing := a
	missing.Key = domain.StringKey("missing")
	bad := ports.Condition{Kind: ports.ConditionRevision, Revision: domain.Revision([]byte{0xff})}
	res := s.Write(t.Context(), []ports.WriteOp{
		{Kind: ports.WritePut, Address: a, Document: doc, Condition: bad},
		{Kind: ports.WriteDelete, Address: a, Condition: bad},
		{Kind: ports.WriteDelete, Address: missing, Condition: bad},
	})
	want := []struct {
		code domain.Code
		key  string
	}{{domain.CodeRevisionMismatch, "/bytes:/v8="}, {domain.CodeRevisionMismatch, "/bytes:/v8="}, {domain.CodeNotFound, "/string:missing"}}
	for i, r := range res {
		msg := r.Err.Error()
		if domain.CodeOf(r.Err) != want[i].code {
			t.Fatalf("op %d: %v, want %s", i, r.Err, want[i].code)
		}
		if !utf8.ValidString(msg) || !strings.Contains(msg, "expected revision /w==") && !strings.Contains(msg, "the expected /w==") || !strings.Contains(msg, want[i].key) {
			t.Fatalf("op %d: message %q must be valid UTF-8 and name the revision and key in base64", i, msg)
		}
	}
	if !strings.Contains(res[0].Err.Error(), w.Revision.String()) {
		t.Fatalf("mismatch message %q does not show the current revision %s", res[0].Err, w.Revision)
	}
	snap := s.Snapshot()
	if len(snap) != 1 || snap[a.ID()].Revision != w.Revision || string(snap[a.ID()].Document.Data) != `{"n":1}` {
		t.Fatalf("failed conditional operations changed the store: %+v", snap)
	}
}

// Reading a record allocates only the results, rewriting it the results,
// the document's copy and the revision: not the record's ID (an address
// longer than the runtime's 32-byte stack buffer for strings).
func TestReadAndRewriteDoNotAllocateTheRecordID(t *testing.T) {
	s := memory.New()
	a := domain.Address{Store: "primary", Namespace: "bench", Dataset: "single-merge", Key: domain.StringKey("a-key-of-some-length")}
	if n := len(domain.AppendAddress(nil, a)); n <= 32 {
		t.Fatalf("the address encodes to %d bytes; the test needs more than 32", n)
	}
	ops := []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"n":1}`)}}}
	addrs := []domain.Address{a}
	ctx := t.Context()
	if r := s.Write(ctx, ops); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	if n := testing.AllocsPerRun(200, func() { s.Read(ctx, addrs) }); n > 1 {
		t.Errorf("a read allocates %v times, want at most 1 (results)", n)
	}
	if n := testing.AllocsPerRun(200, func() { s.Write(ctx, ops) }); n > 3 {
		t.Errorf("a rewrite allocates %v times, want at most 3 (results, document, revision)", n)
	}
	if got := s.Read(ctx, addrs); !got[0].Found || string(got[0].Record.Document.Data) != `{"n":1}` {
		t.Fatalf("read back: %+v", got[0])
	}
}

func TestScanConformance(t *testing.T) {
	storagetest.RunScan(t, storagetest.ScanFixtures{
		NewStorage: func(*testing.T) ports.Storage { return memory.New() },
		Store:      "primary",
		Namespace:  func(testing.TB) string { return "test" },
		Encode:     storagetest.EncodeJSON,
	})
}

// TestDifferentialJSONAndBSON: the same random documents held as JSON and
// as BSON scan and filter alike (one semantics for both formats).
func TestDifferentialJSONAndBSON(t *testing.T) {
	d := storagetest.Differential{Reference: memory.New(), Subject: memory.New(), Store: "p", RefNamespace: "n", Namespace: "n",
		Encode: storagetest.EncodeJSON, SubjectEncode: storagetest.EncodeBSON}
	if n := d.Run(t.Context(), t, 1, 3, 60, 200); n != 600 {
		t.Fatalf("compared %d cases", n)
	}
}

// FuzzScanJSONAndBSON runs the JSON/BSON differential from fuzzed seeds.
func FuzzScanJSONAndBSON(f *testing.F) {
	f.Add(uint64(2))
	f.Fuzz(func(t *testing.T, seed uint64) {
		d := storagetest.Differential{Reference: memory.New(), Subject: memory.New(), Store: "p", RefNamespace: "n", Namespace: "n",
			Encode: storagetest.EncodeJSON, SubjectEncode: storagetest.EncodeBSON}
		d.Run(t.Context(), t, seed, 1, 30, 30)
	})
}

// A read returns the stored bytes themselves (readers never change them:
// ports.Storage.Read) and allocates nothing for them; each is capped, so
// that appending to one copies it and reaches neither the next document
// nor the store.
func TestReadsShareStoredDocuments(t *testing.T) {
	s := memory.New()
	ctx := t.Context()
	addrs := make([]domain.Address, 3)
	var ops []ports.WriteOp
	for i := range addrs {
		addrs[i] = domain.Address{Store: "primary", Namespace: "n", Dataset: "d", Key: domain.StringKey(strings.Repeat("k", i+1))}
		ops = append(ops, ports.WriteOp{Kind: ports.WritePut, Address: addrs[i], Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"i":` + strings.Repeat("1", i+1) + `}`)}})
	}
	for _, r := range s.Write(ctx, ops) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	got := s.Read(ctx, addrs)
	for i := range got {
		d := got[i].Record.Document.Data
		if cap(d) != len(d) {
			t.Fatalf("document %d has capacity %d beyond its %d bytes", i, cap(d), len(d))
		}
		_ = append(d, `XXXXXXXX`...)
	}
	again := s.Read(ctx, addrs)
	for i := range addrs {
		if want := string(ops[i].Document.Data); string(again[i].Record.Document.Data) != want || string(got[i].Record.Document.Data) != want {
			t.Fatalf("record %d reads %q (first read %q) after appending to the documents read, want %q", i, again[i].Record.Document.Data, got[i].Record.Document.Data, want)
		}
		if &again[i].Record.Document.Data[0] != &got[i].Record.Document.Data[0] {
			t.Fatalf("two reads of record %d returned different bytes: the store copied them", i)
		}
	}
}
