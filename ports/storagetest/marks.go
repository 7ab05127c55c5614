package storagetest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Applied marks (ports.Storage's contract, domain.AppliedMark): every
// storage records them, so these cases run for every adapter.

// markTests are the applied-mark cases of the suite.
var markTests = []struct {
	name string
	run  func(t *testing.T, h *harness)
}{
	{"AppliedMarkRecorded", testMarkRecorded},
	{"AppliedMarkDuplicateID", testMarkDuplicate},
	{"AppliedMarkSupersededPosition", testMarkSuperseded},
	{"AppliedMarkRingKeepsMostRecent", testMarkRing},
	{"AppliedMarkFold", testMarkFold},
	{"AppliedMarkKeptByUnmarkedPuts", testMarkKeptByUnmarkedPuts},
	{"AppliedMarkDeletes", testMarkDeletes},
	{"AppliedMarkRevisionConditionAndBase", testMarkRevisionCondition},
	{"AppliedMarkCheckedBeforeCondition", testMarkBeforeCondition},
	{"AppliedMarkCreate", testMarkCreate},
	{"AppliedMarkBatchSliceOrder", testMarkBatchOrder},
	{"AppliedMarkManyRecords", testMarkManyRecords},
}

const testLog = "log-a"

func at(log string, partition int32, offset int64) domain.SourcePosition {
	return domain.SourcePosition{Log: log, Partition: partition, Offset: offset}
}

func mark(pos domain.SourcePosition, keep int, ids ...string) *ports.MarkUpdate {
	return &ports.MarkUpdate{IDs: ids, Position: pos, Keep: keep}
}

func marked(op ports.WriteOp, m *ports.MarkUpdate) ports.WriteOp {
	op.Mark = m
	return op
}

// readMark returns the record's mark and revision; the record must exist.
func (h *harness) readMark(a domain.Address) (domain.AppliedMark, domain.Revision) {
	h.t.Helper()
	r := h.read(a)[0]
	if !r.Found {
		h.t.Fatalf("%v: not found", a)
	}
	return r.Record.Mark, r.Record.Revision
}

// expectMark checks the record's mark: its position and ring, oldest first.
func (h *harness) expectMark(a domain.Address, pos domain.SourcePosition, ring ...domain.AppliedEntry) {
	h.t.Helper()
	got, _ := h.readMark(a)
	want := domain.AppliedMark{Position: pos, Recent: ring}
	if got.Position != want.Position || !slices.Equal(got.Recent, want.Recent) {
		h.t.Fatalf("%v: mark %+v, want %+v", a, got, want)
	}
}

func entry(id string, rev domain.Revision) domain.AppliedEntry {
	return domain.AppliedEntry{ID: id, Revision: rev}
}

// expectApplied checks an AlreadyApplied result and the revision it reports.
func expectApplied(t *testing.T, what string, r ports.WriteResult, rev domain.Revision) {
	t.Helper()
	expect(t, what, r, domain.CodeAlreadyApplied)
	if r.Revision != rev {
		t.Fatalf("%s: ALREADY_APPLIED with revision %q, want the original write's %q", what, r.Revision, rev)
	}
}

// unchanged checks that the record still has the counter and revision.
func (h *harness) unchanged(a domain.Address, counter int, rev domain.Revision) {
	h.t.Helper()
	rec := h.expectCounter(a, counter)
	if rec.Revision != rev {
		h.t.Fatalf("%v: revision %q, want %q (nothing written)", a, rec.Revision, rev)
	}
}

func testMarkRecorded(t *testing.T, h *harness) {
	plain := h.key("mark-none")
	h.writeOK(put(plain, h.doc(plain, 1), none))
	if m, _ := h.readMark(plain); !m.IsZero() {
		t.Fatalf("a record written without a mark reads mark %+v", m)
	}
	a := h.key("mark-rec")
	r := h.writeOK(marked(put(a, h.doc(a, 1), none), mark(at(testLog, 2, 10), 4, "m1")))
	if r.Existed {
		t.Fatal("a marked put of a new record reported Existed")
	}
	h.expectMark(a, at(testLog, 2, 10), entry("m1", r.Revision))
	// A synchronous write (zero position) keeps the position and adds its ID.
	r2 := h.writeOK(marked(put(a, h.doc(a, 2), none), mark(domain.SourcePosition{}, 4, "key-1")))
	h.expectMark(a, at(testLog, 2, 10), entry("m1", r.Revision), entry("key-1", r2.Revision))
	// A marked put on a record written without a mark starts its ring.
	r3 := h.writeOK(marked(put(plain, h.doc(plain, 2), none), mark(at(testLog, 0, 1), 4, "p1")))
	h.expectMark(plain, at(testLog, 0, 1), entry("p1", r3.Revision))
	h.expectCounter(plain, 2)
}

func testMarkDuplicate(t *testing.T, h *harness) {
	a := h.key("mark-dup")
	first := h.writeOK(marked(put(a, h.doc(a, 1), none), mark(at(testLog, 0, 5), 8, "m1")))
	second := h.writeOK(marked(put(a, h.doc(a, 2), none), mark(at(testLog, 0, 6), 8, "m2")))
	// A redelivery of m1 (even at a later offset, as a dead-letter replay
	// would be) changes nothing and answers m1's revision.
	for _, c := range []ports.Condition{none, exists, absent, rev(second.Revision), rev(first.Revision)} {
		expectApplied(t, fmt.Sprintf("m1 again (condition %v)", c.Kind),
			h.write(marked(put(a, h.doc(a, 9), c), mark(at(testLog, 0, 100), 8, "m1")))[0], first.Revision)
	}
	expectApplied(t, "m2 again", h.write(marked(put(a, h.doc(a, 9), none), mark(at(testLog, 0, 100), 8, "m2")))[0], second.Revision)
	// Synchronous retries with an idempotency key are answered the same way.
	expectApplied(t, "m1 as a sync key", h.write(marked(put(a, h.doc(a, 9), none), mark(domain.SourcePosition{}, 8, "m1")))[0], first.Revision)
	h.unchanged(a, 2, second.Revision)
	h.expectMark(a, at(testLog, 0, 6), entry("m1", first.Revision), entry("m2", second.Revision))
}

func testMarkSuperseded(t *testing.T, h *harness) {
	a := h.key("mark-sup")
	r := h.writeOK(marked(put(a, h.doc(a, 1), none), mark(at(testLog, 3, 10), 8, "m10")))
	for _, off := range []int64{10, 9, 0} {
		m := mark(at(testLog, 3, off), 8, fmt.Sprintf("old-%d", off))
		expect(t, fmt.Sprintf("put at offset %d", off), h.write(marked(put(a, h.doc(a, 9), none), m))[0], domain.CodeSuperseded)
		expect(t, fmt.Sprintf("delete at offset %d", off), h.write(marked(del(a, none), m))[0], domain.CodeSuperseded)
	}
	h.unchanged(a, 1, r.Revision)
	h.expectMark(a, at(testLog, 3, 10), entry("m10", r.Revision))
	// Another partition or another log (a re-created topic) is not covered.
	other := h.writeOK(marked(put(a, h.doc(a, 2), none), mark(at(testLog, 4, 1), 8, "p4")))
	h.expectMark(a, at(testLog, 4, 1), entry("m10", r.Revision), entry("p4", other.Revision))
	relog := h.writeOK(marked(put(a, h.doc(a, 3), none), mark(at("log-b", 4, 0), 8, "b0")))
	h.expectMark(a, at("log-b", 4, 0), entry("m10", r.Revision), entry("p4", other.Revision), entry("b0", relog.Revision))
	h.expectCounter(a, 3)
	// A later offset in the mark's partition applies.
	later := h.writeOK(marked(put(a, h.doc(a, 4), none), mark(at("log-b", 4, 7), 8, "b7")))
	if !later.Existed {
		t.Fatal("a put on an existing record did not report Existed")
	}
	h.expectCounter(a, 4)
}

func testMarkRing(t *testing.T, h *harness) {
	a := h.key("mark-ring")
	revs := map[string]domain.Revision{}
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("m%d", i)
		revs[id] = h.writeOK(marked(put(a, h.doc(a, i), none), mark(at(testLog, 0, int64(i)), 3, id))).Revision
	}
	h.expectMark(a, at(testLog, 0, 5), entry("m3", revs["m3"]), entry("m4", revs["m4"]), entry("m5", revs["m5"]))
	// m1 fell out of the ring: at a later position it applies again (the
	// ring's window), at its own position it is superseded.
	expect(t, "m1 at its old offset", h.write(marked(put(a, h.doc(a, 9), none), mark(at(testLog, 0, 1), 3, "m1")))[0], domain.CodeSuperseded)
	expectApplied(t, "m3 still in the ring", h.write(marked(put(a, h.doc(a, 9), none), mark(at(testLog, 0, 3), 3, "m3")))[0], revs["m3"])
	r := h.writeOK(marked(put(a, h.doc(a, 6), none), mark(at(testLog, 0, 6), 3, "m1")))
	h.expectMark(a, at(testLog, 0, 6), entry("m4", revs["m4"]), entry("m5", revs["m5"]), entry("m1", r.Revision))
	// A smaller Keep trims the ring further on the next write.
	r7 := h.writeOK(marked(put(a, h.doc(a, 7), none), mark(at(testLog, 0, 7), 1, "m7")))
	h.expectMark(a, at(testLog, 0, 7), entry("m7", r7.Revision))
}

func testMarkFold(t *testing.T, h *harness) {
	a := h.key("mark-fold")
	r1 := h.writeOK(marked(put(a, h.doc(a, 1), none), mark(at(testLog, 1, 1), 4, "f0")))
	r := h.writeOK(marked(put(a, h.doc(a, 2), rev(r1.Revision)), mark(at(testLog, 1, 9), 4, "f1", "f2", "f3")))
	h.expectMark(a, at(testLog, 1, 9), entry("f0", r1.Revision), entry("f1", r.Revision), entry("f2", r.Revision), entry("f3", r.Revision))
	for _, id := range []string{"f1", "f2", "f3"} {
		expectApplied(t, id+" again", h.write(marked(put(a, h.doc(a, 9), none), mark(at(testLog, 1, 20), 4, id)))[0], r.Revision)
	}
	// A fold in which one member was applied is refused as a whole.
	expectApplied(t, "fold with an applied member", h.write(marked(put(a, h.doc(a, 9), none), mark(at(testLog, 1, 20), 4, "new", "f2")))[0], r.Revision)
	// A fold larger than the ring keeps its last IDs.
	r2 := h.writeOK(marked(put(a, h.doc(a, 3), none), mark(at(testLog, 1, 30), 2, "g1", "g2", "g3")))
	h.expectMark(a, at(testLog, 1, 30), entry("g2", r2.Revision), entry("g3", r2.Revision))
	h.expectCounter(a, 3)
}

func testMarkKeptByUnmarkedPuts(t *testing.T, h *harness) {
	// Records with a mark, records without, and new records, in one batch
	// of unconditional puts and again one by one: every put replaces the
	// document, none wipes a mark.
	const n = 12
	addrs := make([]domain.Address, n)
	rings := make([][]domain.AppliedEntry, n)
	var first []ports.WriteOp
	for i := range addrs {
		addrs[i] = h.key(fmt.Sprintf("mark-keep-%d", i))
		switch i % 3 {
		case 0:
			first = append(first, marked(put(addrs[i], h.doc(addrs[i], 0), none), mark(at(testLog, 0, int64(i)), 4, fmt.Sprintf("k%d", i))))
		case 1:
			first = append(first, put(addrs[i], h.doc(addrs[i], 0), none))
		}
	}
	res := h.write(first...)
	for j, r := range res {
		if r.Err != nil {
			t.Fatalf("setup put %d: %v", j, r.Err)
		}
	}
	j := 0
	for i := range addrs {
		if i%3 == 0 {
			rings[i] = []domain.AppliedEntry{entry(fmt.Sprintf("k%d", i), res[j].Revision)}
		}
		if i%3 != 2 {
			j++
		}
	}
	check := func(step string, counter int) {
		t.Helper()
		for i, a := range addrs {
			m, _ := h.readMark(a)
			want := domain.AppliedMark{Recent: rings[i]}
			if i%3 == 0 {
				want.Position = at(testLog, 0, int64(i))
			}
			if m.Position != want.Position || !slices.Equal(m.Recent, want.Recent) {
				t.Fatalf("%s: record %d: mark %+v, want %+v", step, i, m, want)
			}
			h.expectCounter(a, counter)
		}
	}
	ops := make([]ports.WriteOp, n)
	for i, a := range addrs {
		ops[i] = put(a, h.doc(a, 1), none)
	}
	for i, r := range h.write(ops...) {
		if r.Err != nil || r.Revision.IsZero() {
			t.Fatalf("unmarked put %d: %+v", i, r)
		}
		if r.Existed != (i%3 != 2) {
			t.Fatalf("unmarked put %d: Existed %v", i, r.Existed)
		}
	}
	check("after a batch of upserts", 1)
	for i, a := range addrs {
		h.writeOK(put(a, h.doc(a, 2), none))
		_, cur := h.readMark(a)
		h.writeOK(put(a, h.doc(a, 3), rev(cur)))
		h.writeOK(put(a, h.doc(a, 4), exists))
		if i%3 == 0 {
			// The mark still answers a redelivery with its original revision.
			expectApplied(t, "redelivery after unmarked puts", h.write(marked(put(a, h.doc(a, 9), none), mark(at(testLog, 0, 99), 4, fmt.Sprintf("k%d", i))))[0], rings[i][0].Revision)
		}
	}
	check("after single upserts, revision-conditional puts and replaces", 4)
	// A stale revision without a mark still fails as a mismatch.
	_, cur := h.readMark(addrs[0])
	h.writeOK(put(addrs[0], h.doc(addrs[0], 5), none))
	expect(t, "unmarked put with a stale revision", h.write(put(addrs[0], h.doc(addrs[0], 6), rev(cur)))[0], domain.CodeRevisionMismatch)
	h.expectCounter(addrs[0], 5)
}

func testMarkDeletes(t *testing.T, h *harness) {
	a := h.key("mark-del")
	r := h.writeOK(marked(put(a, h.doc(a, 1), none), mark(at(testLog, 0, 10), 4, "m10")))
	expectApplied(t, "delete carrying an applied ID", h.write(marked(del(a, none), mark(at(testLog, 0, 11), 4, "m10")))[0], r.Revision)
	expect(t, "delete at a covered position", h.write(marked(del(a, none), mark(at(testLog, 0, 9), 4, "m9")))[0], domain.CodeSuperseded)
	expect(t, "conditional delete at a covered position", h.write(marked(del(a, rev(r.Revision)), mark(at(testLog, 0, 10), 4, "m9")))[0], domain.CodeSuperseded)
	h.unchanged(a, 1, r.Revision)
	d := h.writeOK(marked(del(a, rev(r.Revision)), mark(at(testLog, 0, 12), 4, "m12")))
	if !d.Existed {
		t.Fatal("marked delete did not report Existed")
	}
	if h.read(a)[0].Found {
		t.Fatal("record still there after a marked delete")
	}
	// The delete removed the mark: a re-created record starts empty, and a
	// redelivery of the delete on the absent record is a no-op.
	if d := h.writeOK(marked(del(a, none), mark(at(testLog, 0, 12), 4, "m12"))); d.Existed {
		t.Fatal("redelivered delete of an absent record reported Existed")
	}
	h.writeOK(put(a, h.doc(a, 2), absent))
	if m, _ := h.readMark(a); !m.IsZero() {
		t.Fatalf("re-created record has mark %+v", m)
	}
	r2 := h.writeOK(marked(put(a, h.doc(a, 3), none), mark(at(testLog, 0, 5), 4, "m10")))
	h.expectMark(a, at(testLog, 0, 5), entry("m10", r2.Revision))
	// Marked deletes with ConditionExists / a revision on an absent record.
	b := h.key("mark-del-missing")
	expect(t, "marked delete, condition exists, absent record", h.write(marked(del(b, exists), mark(at(testLog, 0, 1), 4, "x")))[0], domain.CodeNotFound)
	expect(t, "marked delete, revision, absent record", h.write(marked(del(b, rev(r2.Revision)), mark(at(testLog, 0, 1), 4, "x")))[0], domain.CodeNotFound)
	expect(t, "marked delete, stale revision", h.write(marked(del(a, rev(r.Revision)), mark(at(testLog, 0, 6), 4, "x")))[0], domain.CodeRevisionMismatch)
	h.expectCounter(a, 3)
}

func testMarkRevisionCondition(t *testing.T, h *harness) {
	a := h.key("mark-cas")
	h.writeOK(marked(put(a, h.doc(a, 1), none), mark(at(testLog, 0, 1), 4, "m1")))
	base, cur := h.readMark(a)
	// A merge: read, check, write with the revision and the mark it read.
	up := mark(at(testLog, 0, 2), 4, "m2")
	up.Base = &base
	r := h.writeOK(marked(put(a, h.doc(a, 2), rev(cur)), up))
	if !r.Existed {
		t.Fatal("revision-conditional put did not report Existed")
	}
	want := base.Advance([]string{"m2"}, r.Revision, at(testLog, 0, 2), 4)
	h.expectMark(a, want.Position, want.Recent...)
	// The same write again (its Base and revision now stale) was applied.
	expectApplied(t, "stale base, applied ID", h.write(marked(put(a, h.doc(a, 9), rev(cur)), up))[0], r.Revision)
	// A new mutation with the stale revision and base: mismatch.
	stale := mark(at(testLog, 0, 3), 4, "m3")
	stale.Base = &base
	expect(t, "stale revision, new ID", h.write(marked(put(a, h.doc(a, 9), rev(cur)), stale))[0], domain.CodeRevisionMismatch)
	// A base that covers the mutation is refused without writing.
	base2, cur2 := h.readMark(a)
	dup := mark(at(testLog, 0, 1), 4, "m-old")
	dup.Base = &base2
	expect(t, "position covered by the base", h.write(marked(put(a, h.doc(a, 9), rev(cur2)), dup))[0], domain.CodeSuperseded)
	// Without a base the storage reads the mark itself.
	r3 := h.writeOK(marked(put(a, h.doc(a, 3), rev(cur2)), mark(at(testLog, 0, 3), 4, "m3")))
	h.expectMark(a, at(testLog, 0, 3), entry("m1", want.Recent[0].Revision), entry("m2", r.Revision), entry("m3", r3.Revision))
	// A conditional delete with a base.
	base3, cur3 := h.readMark(a)
	gone := mark(at(testLog, 0, 4), 4, "m4")
	gone.Base = &base3
	if d := h.writeOK(marked(del(a, rev(cur3)), gone)); !d.Existed {
		t.Fatal("conditional delete did not report Existed")
	}
	if h.read(a)[0].Found {
		t.Fatal("record still there after the conditional delete")
	}
	// A revision condition on an absent record: not found.
	expect(t, "revision condition on the deleted record", h.write(marked(put(a, h.doc(a, 9), rev(cur3)), mark(at(testLog, 0, 5), 4, "m5")))[0], domain.CodeNotFound)
}

func testMarkBeforeCondition(t *testing.T, h *harness) {
	a := h.key("mark-retry")
	r1 := h.writeOK(put(a, h.doc(a, 1), none))
	// A put with an expected revision, retried after an unknown outcome:
	// its first attempt changed the revision, the retry is answered with
	// that attempt's revision, not with a mismatch.
	op := marked(put(a, h.doc(a, 2), rev(r1.Revision)), mark(domain.SourcePosition{}, 4, "key-1"))
	r2 := h.writeOK(op)
	expectApplied(t, "retried revision-conditional put", h.write(op)[0], r2.Revision)
	// A retried create finds the record it created: applied, not
	// ALREADY_EXISTS.
	b := h.key("mark-retry-create")
	create := marked(put(b, h.doc(b, 1), absent), mark(at(testLog, 0, 1), 4, "c1"))
	c1 := h.writeOK(create)
	expectApplied(t, "retried create", h.write(create)[0], c1.Revision)
	expect(t, "create at a covered position", h.write(marked(put(b, h.doc(b, 1), absent), mark(at(testLog, 0, 1), 4, "c0")))[0], domain.CodeSuperseded)
	h.unchanged(a, 2, r2.Revision)
	h.unchanged(b, 1, c1.Revision)
}

func testMarkCreate(t *testing.T, h *harness) {
	a := h.key("mark-create")
	r := h.writeOK(marked(put(a, h.doc(a, 1), absent), mark(at(testLog, 1, 1), 4, "c1")))
	if r.Existed {
		t.Fatal("create reported Existed")
	}
	h.expectMark(a, at(testLog, 1, 1), entry("c1", r.Revision))
	expect(t, "marked create of an existing record", h.write(marked(put(a, h.doc(a, 2), absent), mark(at(testLog, 1, 2), 4, "c2")))[0], domain.CodeAlreadyExists)
	b := h.key("mark-create-missing")
	expect(t, "marked replace of an absent record", h.write(marked(put(b, h.doc(b, 1), exists), mark(at(testLog, 1, 3), 4, "c3")))[0], domain.CodeNotFound)
	if h.read(b)[0].Found {
		t.Fatal("a failed marked replace created the record")
	}
	r2 := h.writeOK(marked(put(a, h.doc(a, 3), exists), mark(at(testLog, 1, 4), 4, "c4")))
	h.expectMark(a, at(testLog, 1, 4), entry("c1", r.Revision), entry("c4", r2.Revision))
	h.expectCounter(a, 3)
}

func testMarkBatchOrder(t *testing.T, h *harness) {
	a, b := h.key("mark-batch-a"), h.key("mark-batch-b")
	p := func(n int64) domain.SourcePosition { return at(testLog, 0, n) }
	res := h.write(
		marked(put(a, h.doc(a, 1), none), mark(p(1), 4, "i1")),   // 0 creates a
		marked(put(b, h.doc(b, 10), none), mark(p(2), 4, "j1")),  // 1 creates b
		marked(put(a, h.doc(a, 2), exists), mark(p(3), 4, "i2")), // 2 replaces a
		marked(put(a, h.doc(a, 9), none), mark(p(9), 4, "i1")),   // 3 duplicate of 0
		marked(put(a, h.doc(a, 9), none), mark(p(3), 4, "i3")),   // 4 superseded by 2
		put(a, h.doc(a, 3), none),                                // 5 unmarked, keeps the mark
		marked(del(a, none), mark(p(4), 4, "i4")),                // 6 deletes a and its mark
		marked(put(a, h.doc(a, 5), absent), mark(p(5), 4, "i1")), // 7 re-creates a: i1 applies again
		marked(put(b, h.doc(b, 11), none), mark(p(6), 4, "j1")),  // 8 duplicate of 1
	)
	for _, i := range []int{0, 1, 2, 5, 6, 7} {
		if res[i].Err != nil {
			t.Fatalf("operation %d failed: %v", i, res[i].Err)
		}
	}
	expectApplied(t, "op 3", res[3], res[0].Revision)
	expect(t, "op 4", res[4], domain.CodeSuperseded)
	expectApplied(t, "op 8", res[8], res[1].Revision)
	if !res[2].Existed || !res[5].Existed || !res[6].Existed || res[7].Existed {
		t.Fatalf("Existed flags do not follow the batch order: %+v", res)
	}
	h.expectCounter(a, 5)
	h.expectMark(a, p(5), entry("i1", res[7].Revision))
	h.unchanged(b, 10, res[1].Revision)
	h.expectMark(b, p(2), entry("j1", res[1].Revision))
}

func testMarkManyRecords(t *testing.T, h *harness) {
	// A batch as the worker sends it: many records, each with its mutation
	// ID; then the same batch redelivered with a few new mutations.
	const n = 60
	addrs := make([]domain.Address, n)
	ops := make([]ports.WriteOp, n)
	for i := range addrs {
		addrs[i] = h.key(fmt.Sprintf("mark-many-%d", i))
		if i%2 == 0 {
			h.writeOK(put(addrs[i], h.doc(addrs[i], 0), none)) // half exist already, without a mark
		}
		ops[i] = marked(put(addrs[i], h.doc(addrs[i], 1), none), mark(at(testLog, 0, int64(100+i)), 8, fmt.Sprintf("w%d", i)))
	}
	first := h.write(ops...)
	for i, r := range first {
		if r.Err != nil || r.Existed != (i%2 == 0) {
			t.Fatalf("marked put %d: %+v", i, r)
		}
	}
	again := make([]ports.WriteOp, n)
	for i := range again {
		again[i] = ops[i]
		if i%5 == 0 {
			again[i] = marked(put(addrs[i], h.doc(addrs[i], 2), none), mark(at(testLog, 0, int64(200+i)), 8, fmt.Sprintf("v%d", i)))
		}
	}
	res := h.write(again...)
	for i, r := range res {
		if i%5 == 0 {
			if r.Err != nil {
				t.Fatalf("new mutation %d: %v", i, r.Err)
			}
			h.expectCounter(addrs[i], 2)
			continue
		}
		expectApplied(t, fmt.Sprintf("redelivery %d", i), r, first[i].Revision)
		h.unchanged(addrs[i], 1, first[i].Revision)
	}
	// Marked deletes of all of them, redelivered.
	dels := make([]ports.WriteOp, n)
	for i := range dels {
		dels[i] = marked(del(addrs[i], none), mark(at(testLog, 0, int64(300+i)), 8, fmt.Sprintf("d%d", i)))
	}
	for i, r := range h.write(dels...) {
		if r.Err != nil || !r.Existed {
			t.Fatalf("marked delete %d: %+v", i, r)
		}
	}
	for i, r := range h.write(dels...) {
		if r.Err != nil || r.Existed {
			t.Fatalf("redelivered delete %d: %+v", i, r)
		}
	}
	for i, r := range h.read(addrs...) {
		if r.Found {
			t.Fatalf("record %d still there", i)
		}
	}
}
