// Package storagetest is the conformance suite every ports.Storage
// implementation runs: one suite, every adapter. The adapter's test passes
// Fixtures (how to build a fresh storage, keep tests apart and make
// documents) and Features (what the storage declares it can and cannot
// hold). Cases size their data and skip themselves by reading those, never
// by test name or by adapter. Every case runs in parallel with the others,
// each on a storage and a namespace of its own.
package storagetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Fixtures tell the suite how to build what it tests.
type Fixtures struct {
	// NewStorage returns a ready storage. Every case calls it once; the
	// suite does not close it (register cleanup with t.Cleanup).
	NewStorage func(t *testing.T) ports.Storage
	// NewConcurrentStorage, when set, returns the storage the concurrent
	// read-modify-write case uses instead (for servers that need special
	// client settings for it).
	NewConcurrentStorage func(t *testing.T) ports.Storage
	// Broken returns a storage that stands for s (from NewStorage) with
	// its database unreachable: every Read, Write and Ping fails as a
	// whole, and nothing reaches s's records; Validate, which does no I/O,
	// still answers. Nil skips the whole-call failure case.
	Broken func(t *testing.T, s ports.Storage) ports.Storage
	// Store is the store name used in addresses.
	Store string
	// Namespace returns a namespace that no other test uses, so that cases
	// can run in parallel (adapters with persistent state map it to a
	// fresh database and drop it on cleanup).
	Namespace func(t testing.TB) string
	// NewDocument returns a document the storage accepts for addr, holding
	// the counter n and the payload bytes.
	NewDocument func(t testing.TB, addr domain.Address, n int, payload []byte) domain.Document
	// Counter extracts the counter from a document made by NewDocument.
	Counter func(t testing.TB, d domain.Document) int
	// EmptyDocument returns the smallest document the storage accepts for addr.
	EmptyDocument func(t testing.TB, addr domain.Address) domain.Document
	// InvalidDocuments, when set, returns documents of an accepted content
	// type that the storage cannot hold at addr (malformed, or using a
	// reserved field); Validate and Write must reject each.
	InvalidDocuments func(t testing.TB, addr domain.Address) []domain.Document
	// MaxParallel bounds how many cases run at once (0: as many as go
	// test's -parallel flag allows).
	MaxParallel int
}

// Features declare what the storage can hold and how hard the suite may
// load it. The zero value claims everything: every key kind, no size limit,
// no name the storage rejects.
type Features struct {
	// KeyKinds lists the key kinds the storage supports (nil: all).
	KeyKinds []domain.KeyKind
	// MaxDocumentBytes is the storage's limit on one document (0: none): a
	// document with a payload of that many bytes must be rejected with
	// CodeInvalidArgument.
	MaxDocumentBytes int
	// LargePayloadBytes is the payload size of the large-document case
	// (default 1 MiB); it must fit under MaxDocumentBytes.
	LargePayloadBytes int
	// InvalidNamespaces and InvalidDatasets are names the storage cannot
	// hold; operations on them must be rejected with CodeInvalidArgument.
	InvalidNamespaces, InvalidDatasets []string
	// ConcurrentWriters × MergesPerWriter read-modify-write increments run
	// concurrently on one record (defaults 16 × 200).
	ConcurrentWriters, MergesPerWriter int
}

// AllKeyKinds lists every key kind.
var AllKeyKinds = []domain.KeyKind{domain.KeyString, domain.KeyInt64, domain.KeyBytes, domain.KeyObjectID}

// caseTimeout bounds one case once it runs.
const caseTimeout = 2 * time.Minute

// Run runs the whole suite.
func Run(t *testing.T, fx Fixtures, f Features) {
	if f.KeyKinds == nil {
		f.KeyKinds = AllKeyKinds
	}
	if f.ConcurrentWriters == 0 {
		f.ConcurrentWriters = 16
	}
	if f.MergesPerWriter == 0 {
		f.MergesPerWriter = 200
	}
	if f.LargePayloadBytes == 0 {
		f.LargePayloadBytes = 1 << 20
	}
	tests := []struct {
		name string
		run  func(t *testing.T, h *harness)
	}{
		{"PutModes", testPutModes},
		{"RevisionPreconditions", testRevisionPreconditions},
		{"RevisionsAreNotReusedAfterRecreate", testRevisionsNotReused},
		{"BatchReadWithMissingRecords", testBatchRead},
		{"CallersSlicesReusedAfterTheCall", testSlicesReused},
		{"Deletes", testDeletes},
		{"SameRecordOrderingInOneBatch", testSameRecordOrdering},
		{"MixedBatchResultsPerOperation", testMixedBatch},
		{"OneOperationOfAKindBesideOthers", testOneOfAKind},
		{"LargeAndEmptyDocuments", testLargeAndEmpty},
		{"EveryKeyKind", testKeyKinds},
		{"ConcurrentReadModifyWrite", testConcurrentMerges},
		{"Ping", func(t *testing.T, h *harness) {
			if err := h.s.Ping(h.ctx); err != nil {
				t.Fatalf("ping: %v", err)
			}
		}},
		{"Validate", testValidate},
		{"CanceledContext", testCanceledContext},
		{"WholeCallFailure", testWholeCallFailure},
	}
	tests = append(tests, markTests...)
	var slots chan struct{}
	if fx.MaxParallel > 0 {
		slots = make(chan struct{}, fx.MaxParallel)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if slots != nil {
				slots <- struct{}{}
				defer func() { <-slots }()
			}
			ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
			defer cancel()
			h := &harness{t: t, s: fx.NewStorage(t), fx: fx, f: f, ctx: ctx, ns: fx.Namespace(t)}
			tc.run(t, h)
		})
	}
}

type harness struct {
	t   *testing.T
	s   ports.Storage
	fx  Fixtures
	f   Features
	ctx context.Context
	ns  string
}

func (h *harness) addr(dataset string, k domain.Key) domain.Address {
	return domain.Address{Store: h.fx.Store, Namespace: h.ns, Dataset: dataset, Key: k}
}

func (h *harness) key(name string) domain.Address { return h.addr("records", domain.StringKey(name)) }

func (h *harness) doc(a domain.Address, n int) domain.Document {
	return h.fx.NewDocument(h.t, a, n, []byte(fmt.Sprintf("payload-%d", n)))
}

func put(a domain.Address, d domain.Document, c ports.Condition) ports.WriteOp {
	return ports.WriteOp{Kind: ports.WritePut, Address: a, Document: d, Condition: c}
}

func del(a domain.Address, c ports.Condition) ports.WriteOp {
	return ports.WriteOp{Kind: ports.WriteDelete, Address: a, Condition: c}
}

var (
	none   = ports.Condition{Kind: ports.ConditionNone}
	absent = ports.Condition{Kind: ports.ConditionAbsent}
	exists = ports.Condition{Kind: ports.ConditionExists}
)

func rev(r domain.Revision) ports.Condition {
	return ports.Condition{Kind: ports.ConditionRevision, Revision: r}
}

// write writes valid operations: Validate must accept each of them.
func (h *harness) write(ops ...ports.WriteOp) []ports.WriteResult {
	h.t.Helper()
	for i := range ops {
		if err := h.s.Validate(ops[i]); err != nil {
			h.t.Fatalf("Validate rejects operation %d on %v, which the storage must hold: %v", i, ops[i].Address, err)
		}
	}
	res := h.s.Write(h.ctx, ops)
	if len(res) != len(ops) {
		h.t.Fatalf("Write returned %d results for %d operations", len(res), len(ops))
	}
	return res
}

func (h *harness) writeOK(op ports.WriteOp) ports.WriteResult {
	h.t.Helper()
	r := h.write(op)[0]
	if r.Err != nil {
		h.t.Fatalf("write %v: %v", op.Address, r.Err)
	}
	if op.Kind == ports.WritePut && r.Revision.IsZero() {
		h.t.Fatalf("put %v returned no revision", op.Address)
	}
	return r
}

func (h *harness) read(addrs ...domain.Address) []ports.ReadResult {
	h.t.Helper()
	res := h.s.Read(h.ctx, addrs)
	if len(res) != len(addrs) {
		h.t.Fatalf("Read returned %d results for %d addresses", len(res), len(addrs))
	}
	for i, r := range res {
		if r.Err != nil {
			h.t.Fatalf("read %v: %v", addrs[i], r.Err)
		}
	}
	return res
}

// expect checks that a result failed with the given code.
func expect(t *testing.T, what string, r ports.WriteResult, code domain.Code) {
	t.Helper()
	if r.Err == nil {
		t.Fatalf("%s: succeeded, want %s", what, code)
	}
	var e *domain.Error
	if !errors.As(r.Err, &e) || e.Code != code {
		t.Fatalf("%s: error %v (code %s), want %s", what, r.Err, domain.CodeOf(r.Err), code)
	}
}

func (h *harness) expectCounter(a domain.Address, want int) domain.Record {
	h.t.Helper()
	r := h.read(a)[0]
	if !r.Found {
		h.t.Fatalf("%v: not found, want counter %d", a, want)
	}
	if got := h.fx.Counter(h.t, r.Record.Document); got != want {
		h.t.Fatalf("%v: counter %d, want %d", a, got, want)
	}
	return r.Record
}

func testPutModes(t *testing.T, h *harness) {
	a := h.key("modes")
	r1 := h.writeOK(put(a, h.doc(a, 1), none))
	if r1.Existed {
		t.Fatal("upsert of a new record reported Existed")
	}
	r2 := h.writeOK(put(a, h.doc(a, 2), none))
	if !r2.Existed || r2.Revision == r1.Revision {
		t.Fatalf("upsert of an existing record: existed=%v revision %q after %q", r2.Existed, r2.Revision, r1.Revision)
	}
	expect(t, "create on existing", h.write(put(a, h.doc(a, 3), absent))[0], domain.CodeAlreadyExists)
	h.expectCounter(a, 2)

	b := h.key("modes-new")
	expect(t, "replace on absent", h.write(put(b, h.doc(b, 1), exists))[0], domain.CodeNotFound)
	if h.read(b)[0].Found {
		t.Fatal("failed replace created the record")
	}
	if r := h.writeOK(put(b, h.doc(b, 4), absent)); r.Existed {
		t.Fatal("create reported Existed")
	}
	r := h.writeOK(put(b, h.doc(b, 5), exists))
	if !r.Existed {
		t.Fatal("replace did not report Existed")
	}
	rec := h.expectCounter(b, 5)
	if rec.Revision != r.Revision {
		t.Fatalf("read revision %q differs from written %q", rec.Revision, r.Revision)
	}
}

func testRevisionPreconditions(t *testing.T, h *harness) {
	a := h.key("cas")
	r1 := h.writeOK(put(a, h.doc(a, 1), none))
	r2 := h.writeOK(put(a, h.doc(a, 2), rev(r1.Revision)))
	expect(t, "put with stale revision", h.write(put(a, h.doc(a, 3), rev(r1.Revision)))[0], domain.CodeRevisionMismatch)
	expect(t, "delete with stale revision", h.write(del(a, rev(r1.Revision)))[0], domain.CodeRevisionMismatch)
	h.expectCounter(a, 2)
	missing := h.key("cas-missing")
	expect(t, "put with revision on absent record", h.write(put(missing, h.doc(missing, 1), rev(r2.Revision)))[0], domain.CodeNotFound)
	expect(t, "delete with revision on absent record", h.write(del(missing, rev(r2.Revision)))[0], domain.CodeNotFound)
	if d := h.writeOK(del(a, rev(r2.Revision))); !d.Existed {
		t.Fatal("delete with the right revision did not report Existed")
	}
	if h.read(a)[0].Found {
		t.Fatal("record still there after delete")
	}
	if h.read(missing)[0].Found {
		t.Fatal("failed conditional put created a record")
	}
}

func testRevisionsNotReused(t *testing.T, h *harness) {
	a := h.key("aba")
	seen := map[domain.Revision]bool{}
	var last domain.Revision
	for i := 0; i < 3; i++ {
		r := h.writeOK(put(a, h.doc(a, i), absent))
		if seen[r.Revision] {
			t.Fatalf("revision %q reused after delete and re-create", r.Revision)
		}
		seen[r.Revision] = true
		last = r.Revision
		h.writeOK(del(a, none))
	}
	// A stale revision from an earlier incarnation must not match the new one.
	h.writeOK(put(a, h.doc(a, 9), absent))
	expect(t, "revision of a deleted incarnation", h.write(put(a, h.doc(a, 10), rev(last)))[0], domain.CodeRevisionMismatch)
}

func testBatchRead(t *testing.T, h *harness) {
	a, b, missing := h.key("read-a"), h.key("read-b"), h.key("read-missing")
	ra := h.writeOK(put(a, h.doc(a, 1), none))
	rb := h.writeOK(put(b, h.doc(b, 2), none))
	other := h.addr("other-dataset", domain.StringKey("read-a"))
	res := h.read(a, missing, b, a, other)
	if !res[0].Found || !res[2].Found || !res[3].Found {
		t.Fatalf("existing records not found: %+v", res)
	}
	if res[1].Found || res[4].Found {
		t.Fatal("missing records reported found")
	}
	if res[0].Record.Revision != ra.Revision || res[2].Record.Revision != rb.Revision {
		t.Fatal("read revisions differ from the written ones")
	}
	if h.fx.Counter(t, res[0].Record.Document) != 1 || h.fx.Counter(t, res[2].Record.Document) != 2 || h.fx.Counter(t, res[3].Record.Document) != 1 {
		t.Fatal("read returned the wrong documents")
	}
	want := h.doc(a, 1)
	if got := res[0].Record.Document; got.ContentType != want.ContentType || !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("document changed on the way through storage:\n got %q %x\nwant %q %x", got.ContentType, got.Data, want.ContentType, want.Data)
	}
}

// testSlicesReused: the caller reuses its slices once a call returns
// (the application pools them): a storage keeps neither the operations
// nor the bytes of documents not handed over (WriteOp.HandOver), nor the
// addresses it read. Each is overwritten right after its call.
func testSlicesReused(t *testing.T, h *harness) {
	a, b, c := h.key("reuse-a"), h.key("reuse-b"), h.key("reuse-c")
	da, db := h.doc(a, 1), h.doc(b, 2)
	ops := []ports.WriteOp{put(a, da, none), put(b, db, none)}
	for i, r := range h.write(ops...) {
		if r.Err != nil {
			t.Fatalf("put %d: %v", i, r.Err)
		}
	}
	want := [][]byte{bytes.Clone(da.Data), bytes.Clone(db.Data)}
	for i := range ops {
		for k := range ops[i].Document.Data {
			ops[i].Document.Data[k] ^= 0xff
		}
		ops[i] = put(c, h.doc(c, 9), none)
	}
	addrs := []domain.Address{a, b}
	res := h.read(addrs...)
	addrs[0], addrs[1] = c, c
	for i, r := range res {
		if !r.Found || !bytes.Equal(r.Record.Document.Data, want[i]) {
			t.Fatalf("record %d after its operations were overwritten: found %v, document %q, want %q", i, r.Found, r.Record.Document.Data, want[i])
		}
	}
	if h.read(c)[0].Found {
		t.Fatal("a record exists at an address only written into the operations after the call")
	}
	for i, r := range h.read(a, b) {
		if !r.Found || !bytes.Equal(r.Record.Document.Data, want[i]) {
			t.Fatalf("record %d read again: found %v, document %q, want %q", i, r.Found, r.Record.Document.Data, want[i])
		}
	}
}

func testDeletes(t *testing.T, h *harness) {
	a := h.key("del")
	h.writeOK(put(a, h.doc(a, 1), none))
	if r := h.writeOK(del(a, none)); !r.Existed {
		t.Fatal("delete of an existing record did not report Existed")
	}
	if h.read(a)[0].Found {
		t.Fatal("deleted record still readable")
	}
	if r := h.writeOK(del(a, none)); r.Existed {
		t.Fatal("delete of an absent record reported Existed")
	}
	if r := h.writeOK(put(a, h.doc(a, 2), absent)); r.Existed {
		t.Fatal("re-create after delete reported Existed")
	}
	h.expectCounter(a, 2)
}

func testSameRecordOrdering(t *testing.T, h *harness) {
	a, b := h.key("order-a"), h.key("order-b")
	res := h.write(
		put(a, h.doc(a, 1), none),    // 0 create a
		put(b, h.doc(b, 10), none),   // 1 create b
		put(a, h.doc(a, 2), absent),  // 2 fails: a exists now
		put(a, h.doc(a, 3), exists),  // 3 replaces
		del(b, none),                 // 4 deletes b
		put(b, h.doc(b, 11), absent), // 5 re-creates b
		del(a, none),                 // 6 deletes a
		put(a, h.doc(a, 4), exists),  // 7 fails: a is gone
		put(a, h.doc(a, 5), absent),  // 8 creates a
	)
	for _, i := range []int{0, 1, 3, 4, 5, 6, 8} {
		if res[i].Err != nil {
			t.Fatalf("operation %d failed: %v", i, res[i].Err)
		}
	}
	expect(t, "op 2 create on existing", res[2], domain.CodeAlreadyExists)
	expect(t, "op 7 replace on deleted", res[7], domain.CodeNotFound)
	if !res[3].Existed || !res[4].Existed || res[5].Existed || !res[6].Existed || res[8].Existed {
		t.Fatalf("Existed flags do not follow the batch order: %+v", res)
	}
	h.expectCounter(a, 5)
	h.expectCounter(b, 11)
}

func testMixedBatch(t *testing.T, h *harness) {
	var ops []ports.WriteOp
	for i := 0; i < 50; i++ {
		a := h.key(fmt.Sprintf("mixed-%d", i))
		ops = append(ops, put(a, h.doc(a, i), none))
	}
	first := h.write(ops...)
	for i, r := range first {
		if r.Err != nil {
			t.Fatalf("put %d: %v", i, r.Err)
		}
	}
	// Half the creates collide, conditional writes with stale revisions fail.
	ops = ops[:0]
	for i := 0; i < 50; i++ {
		a := h.key(fmt.Sprintf("mixed-%d", i))
		switch i % 4 {
		case 0:
			ops = append(ops, put(a, h.doc(a, 100+i), absent)) // collides
		case 1:
			b := h.key(fmt.Sprintf("mixed-new-%d", i))
			ops = append(ops, put(b, h.doc(b, 200+i), absent))
		case 2:
			ops = append(ops, put(a, h.doc(a, 300+i), rev(first[i].Revision)))
		case 3:
			ops = append(ops, put(a, h.doc(a, 400+i), rev(first[i-1].Revision))) // stale
		}
	}
	res := h.write(ops...)
	for i, r := range res {
		switch i % 4 {
		case 0:
			expect(t, fmt.Sprintf("op %d colliding create", i), r, domain.CodeAlreadyExists)
		case 1, 2:
			if r.Err != nil {
				t.Fatalf("op %d: %v", i, r.Err)
			}
		case 3:
			expect(t, fmt.Sprintf("op %d stale revision", i), r, domain.CodeRevisionMismatch)
		}
	}
	for i := 0; i < 50; i++ {
		a := h.key(fmt.Sprintf("mixed-%d", i))
		want := i
		if i%4 == 2 {
			want = 300 + i
		}
		h.expectCounter(a, want)
		if i%4 == 1 {
			h.expectCounter(h.key(fmt.Sprintf("mixed-new-%d", i)), 200+i)
		}
	}
}

// testOneOfAKind: calls of one operation of a kind beside two of another
// (every pair of create, unconditional put, revision put and delete), the
// shapes an adapter may write with different statements in one call; every
// operation gets its own result and its effect.
func testOneOfAKind(t *testing.T, h *harness) {
	kinds := []string{"create", "put", "revision put", "delete"}
	for _, one := range kinds {
		for _, two := range kinds {
			if one == two {
				continue
			}
			var ops []ports.WriteOp
			var want []int // the record's counter after the call; -1: deleted
			for n, kind := range []string{one, two, two} {
				a := h.key(fmt.Sprintf("one-of-a-kind %s beside %s #%d", one, two, n))
				var prior domain.Revision
				if kind != "create" {
					prior = h.writeOK(put(a, h.doc(a, 1), none)).Revision
				}
				switch kind {
				case "create":
					ops, want = append(ops, put(a, h.doc(a, 2), absent)), append(want, 2)
				case "put":
					ops, want = append(ops, put(a, h.doc(a, 3), none)), append(want, 3)
				case "revision put":
					ops, want = append(ops, put(a, h.doc(a, 4), rev(prior))), append(want, 4)
				case "delete":
					ops, want = append(ops, del(a, rev(prior))), append(want, -1)
				}
			}
			for n, r := range h.write(ops...) {
				if r.Err != nil {
					t.Fatalf("%s beside %s, operation %d: %v", one, two, n, r.Err)
				}
				a := ops[n].Address
				if want[n] < 0 {
					if got := h.read(a)[0]; got.Found {
						t.Fatalf("%s beside %s: the deleted record %v is still there", one, two, a)
					}
					continue
				}
				if got := h.expectCounter(a, want[n]); got.Revision != r.Revision {
					t.Fatalf("%s beside %s, operation %d: revision %q written, %q stored", one, two, n, r.Revision, got.Revision)
				}
			}
		}
	}
}

func testLargeAndEmpty(t *testing.T, h *harness) {
	big := h.key("large")
	payload := bytes.Repeat([]byte("0123456789abcdef"), h.f.LargePayloadBytes/16)
	d := h.fx.NewDocument(t, big, 7, payload)
	h.writeOK(put(big, d, none))
	got := h.read(big)[0]
	if !got.Found || !bytes.Equal(got.Record.Document.Data, d.Data) {
		t.Fatalf("large document (%d bytes) did not round-trip", len(d.Data))
	}
	empty := h.key("empty")
	e := h.fx.EmptyDocument(t, empty)
	h.writeOK(put(empty, e, none))
	r := h.read(empty)[0]
	if !r.Found || !bytes.Equal(r.Record.Document.Data, e.Data) || r.Record.Document.ContentType != e.ContentType {
		t.Fatalf("empty document did not round-trip: %+v", r)
	}
}

func testKeyKinds(t *testing.T, h *harness) {
	oid := []byte{0x65, 0x1f, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	all := map[domain.KeyKind][]domain.Key{
		domain.KeyString:   {domain.StringKey("1"), domain.StringKey("ünïcode/key with spaces")},
		domain.KeyInt64:    {domain.Int64Key(1), domain.Int64Key(-9223372036854775808)},
		domain.KeyBytes:    {domain.BytesKey(oid), domain.BytesKey([]byte{0, 0xff})},
		domain.KeyObjectID: {domain.ObjectIDKey(oid)},
	}
	var addrs []domain.Address
	for _, kind := range h.f.KeyKinds {
		for _, k := range all[kind] {
			addrs = append(addrs, h.addr("keys", k))
		}
	}
	ops := make([]ports.WriteOp, len(addrs))
	for i, a := range addrs {
		ops[i] = put(a, h.doc(a, i), absent)
	}
	for i, r := range h.write(ops...) {
		if r.Err != nil {
			t.Fatalf("create %v: %v (keys of different kinds must be different records)", addrs[i], r.Err)
		}
	}
	for i, r := range h.read(addrs...) {
		if !r.Found || h.fx.Counter(t, r.Record.Document) != i {
			t.Fatalf("key %v did not round-trip to its own record: %+v", addrs[i], r)
		}
	}
}

func testConcurrentMerges(t *testing.T, h *harness) {
	if h.fx.NewConcurrentStorage != nil {
		h.s = h.fx.NewConcurrentStorage(t)
	}
	a := h.key("counter")
	h.writeOK(put(a, h.doc(a, 0), none))
	var wg sync.WaitGroup
	var mu sync.Mutex
	conflicts := 0
	errs := make(chan error, h.f.ConcurrentWriters)
	for w := 0; w < h.f.ConcurrentWriters; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < h.f.MergesPerWriter; i++ {
				for attempt := 0; ; attempt++ {
					if attempt > 10000 {
						errs <- fmt.Errorf("increment did not converge")
						return
					}
					r := h.s.Read(h.ctx, []domain.Address{a})[0]
					if r.Err != nil || !r.Found {
						errs <- fmt.Errorf("read: found=%v err=%v", r.Found, r.Err)
						return
					}
					n := h.fx.Counter(t, r.Record.Document)
					w := h.s.Write(h.ctx, []ports.WriteOp{put(a, h.doc(a, n+1), rev(r.Record.Revision))})[0]
					if w.Err == nil {
						break
					}
					if domain.CodeOf(w.Err) != domain.CodeRevisionMismatch {
						errs <- fmt.Errorf("conditional write: %v", w.Err)
						return
					}
					mu.Lock()
					conflicts++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := h.f.ConcurrentWriters * h.f.MergesPerWriter
	h.expectCounter(a, want)
	t.Logf("%d concurrent increments exact; %d revision conflicts retried", want, conflicts)
}
