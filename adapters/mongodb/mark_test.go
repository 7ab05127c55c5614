package mongodb_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/ports"
)

func markOf(ids []string, pos domain.SourcePosition, keep int) *ports.MarkUpdate {
	return &ports.MarkUpdate{IDs: ids, Position: pos, Keep: keep}
}

// TestMarkedWritesOnLegacyDocuments: the first write with a mark on a
// record another program wrote (no hidden field, an int32 _id, an unusual
// field order) adds the hidden field with the mark, conditional on the
// field still being absent, and leaves every other byte as the write
// carried it: a merge-like revision-conditional put with the legacy
// revision and an empty Base, and an unconditional put through the
// read-check-write path.
func TestMarkedWritesOnLegacyDocuments(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	db := freshDatabase(t, c)
	ctx := ctxT(t)
	coll := c.Database(db).Collection("things")
	s := newStore(t, c, mongodb.Options{})
	pos := domain.SourcePosition{Log: "topic-1", Partition: 2, Offset: 40}

	orig := mustMarshal(t, legacyDocument(t, srv))
	if _, err := coll.InsertOne(ctx, bson.Raw(orig)); err != nil {
		t.Fatal(err)
	}
	numeric := mustMarshal(t, bson.D{{Key: "_id", Value: int32(7)}, {Key: "z", Value: 1}, {Key: "a", Value: bson.D{{Key: "y", Value: 2.5}}}})
	if _, err := coll.InsertOne(ctx, bson.Raw(numeric)); err != nil {
		t.Fatal(err)
	}
	str := domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: domain.StringKey("legacy-1")}
	num := domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: domain.Int64Key(7)}
	read := s.Read(ctx, []domain.Address{str, num})
	for i, r := range read {
		if r.Err != nil || !r.Found || r.Record.Revision != mongodb.LegacyRevision || !r.Record.Mark.IsZero() {
			t.Fatalf("legacy read %d: %+v", i, r)
		}
	}
	// The documents exactly as read (carrying their own _id), written back
	// with a mark: what a merge or a redelivered put of them would send.
	base := read[0].Record.Mark
	res := s.Write(ctx, []ports.WriteOp{
		{Kind: ports.WritePut, Address: str, Document: read[0].Record.Document,
			Condition: ports.Condition{Kind: ports.ConditionRevision, Revision: mongodb.LegacyRevision},
			Mark:      &ports.MarkUpdate{IDs: []string{"m1"}, Position: pos, Keep: 4, Base: &base}},
		{Kind: ports.WritePut, Address: num, Document: read[1].Record.Document, Mark: markOf([]string{"n1"}, pos, 4)},
	})
	for i, r := range res {
		if r.Err != nil || !r.Existed {
			t.Fatalf("first marked write %d on a legacy record: %+v", i, r)
		}
	}
	for i, want := range [][]byte{orig, numeric} {
		id := []any{"legacy-1", int32(7)}[i]
		after, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		wantOrder, wantEls := elementsByKey(t, want)
		gotOrder, gotEls := elementsByKey(t, after)
		if strings.Join(gotOrder, ",") != strings.Join(append(wantOrder, "__sink"), ",") {
			t.Fatalf("record %d: fields %v, want %v + __sink", i, gotOrder, wantOrder)
		}
		for k, el := range wantEls {
			if !bytes.Equal(gotEls[k], el) {
				t.Errorf("record %d: field %q changed: %x -> %x", i, k, el, gotEls[k])
			}
		}
		meta := after.Lookup("__sink").Document()
		m := meta.Lookup("m").Document()
		if m.Lookup("l").StringValue() != pos.Log || m.Lookup("o").Int64() != pos.Offset || meta.Lookup("v").Int32() != 1 {
			t.Fatalf("record %d: hidden field %v", i, meta)
		}
		if _, err := meta.LookupErr("idAdded"); err == nil {
			t.Fatalf("record %d: the document had its own _id, yet the metadata says Sink added it", i)
		}
	}
	// The legacy revision no longer matches; the marks answer redeliveries.
	for i, a := range []domain.Address{str, num} {
		r := s.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: read[i].Record.Document,
			Condition: ports.Condition{Kind: ports.ConditionRevision, Revision: mongodb.LegacyRevision}, Mark: markOf([]string{"other"}, domain.SourcePosition{}, 4)}})[0]
		if domain.CodeOf(r.Err) != domain.CodeRevisionMismatch {
			t.Fatalf("legacy revision after the first marked write: %v", r.Err)
		}
		r = s.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: read[i].Record.Document, Mark: markOf([]string{[]string{"m1", "n1"}[i]}, pos, 4)}})[0]
		if domain.CodeOf(r.Err) != domain.CodeAlreadyApplied || r.Revision != res[i].Revision {
			t.Fatalf("redelivery on the former legacy record %d: %+v", i, r)
		}
	}
	// A marked delete of a legacy record is conditional on the hidden
	// field's absence too.
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: int32(8)}, {Key: "x", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	gone := domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: domain.Int64Key(8)}
	if r := s.Write(ctx, []ports.WriteOp{{Kind: ports.WriteDelete, Address: gone, Mark: markOf([]string{"d"}, pos, 4)}})[0]; r.Err != nil || !r.Existed {
		t.Fatalf("marked delete of a legacy record: %+v", r)
	}
	if n, _ := coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: 8}}); n != 0 {
		t.Fatal("legacy record not deleted")
	}
}

// TestMarkSurvivesConcurrentWrites: writers apply marked puts with unique
// IDs while others replace the same record with unconditional,
// replace-only and revision-conditional puts without a mark. Every marked
// put must end up in the ring once, with the revision its write returned:
// a put without a mark never wipes or rewinds the mark, and the marked
// writes' read-check-write is atomic.
func TestMarkSurvivesConcurrentWrites(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	db := freshDatabase(t, c)
	ctx := ctxT(t)
	s := newStore(t, c, mongodb.Options{MarkRing: domain.MaxAppliedRing})
	a := domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: domain.StringKey("hot")}
	doc := func(n int) domain.Document { return bsonDoc(t, bson.D{{Key: "n", Value: int64(n)}}) }
	const markers, plain, each = 4, 4, 25
	var wg sync.WaitGroup
	var mu sync.Mutex
	applied := map[string]domain.Revision{}
	errs := make(chan error, markers+plain)
	for w := range markers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				// Sync keyed writes (no position) so that writers do not
				// supersede each other; with a retry on conflicts.
				for attempt := 0; ; attempt++ {
					r := s.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: doc(i), Mark: markOf([]string{id}, domain.SourcePosition{}, domain.MaxAppliedRing)}})[0]
					if r.Err == nil {
						mu.Lock()
						applied[id] = r.Revision
						mu.Unlock()
						break
					}
					if domain.CodeOf(r.Err) != domain.CodeAborted || attempt > 20 {
						errs <- fmt.Errorf("marked put %s: %v", id, r.Err)
						return
					}
				}
			}
		})
	}
	for w := range plain {
		wg.Go(func() {
			for i := range each {
				op := ports.WriteOp{Kind: ports.WritePut, Address: a, Document: doc(-i)}
				switch (w + i) % 3 {
				case 1:
					op.Condition.Kind = ports.ConditionExists
				case 2:
					r := s.Read(ctx, []domain.Address{a})[0]
					if r.Err != nil {
						errs <- r.Err
						return
					}
					if !r.Found {
						continue
					}
					op.Condition = ports.Condition{Kind: ports.ConditionRevision, Revision: r.Record.Revision}
				}
				r := s.Write(ctx, []ports.WriteOp{op})[0]
				switch code := domain.CodeOf(r.Err); {
				case r.Err == nil, code == domain.CodeRevisionMismatch, code == domain.CodeNotFound, code == domain.CodeAborted:
				default:
					errs <- fmt.Errorf("unmarked put: %v", r.Err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r := s.Read(ctx, []domain.Address{a})[0]
	if r.Err != nil || !r.Found {
		t.Fatalf("read: %+v", r)
	}
	ring := r.Record.Mark.Recent
	if len(ring) != markers*each {
		t.Fatalf("ring holds %d IDs, want the %d applied", len(ring), markers*each)
	}
	seen := map[string]bool{}
	for _, e := range ring {
		if seen[e.ID] {
			t.Fatalf("ID %s twice in the ring", e.ID)
		}
		seen[e.ID] = true
		if rev, ok := applied[e.ID]; !ok || rev != e.Revision {
			t.Fatalf("ring entry %+v, the write returned %q", e, rev)
		}
	}
	// Ring order is the order the writes took effect: each writer's IDs in
	// its own order.
	for w := range markers {
		var mine []string
		for _, e := range ring {
			if strings.HasPrefix(e.ID, fmt.Sprintf("w%d-", w)) {
				mine = append(mine, e.ID)
			}
		}
		want := make([]string, each)
		for i := range want {
			want[i] = fmt.Sprintf("w%d-%d", w, i)
		}
		if !slices.Equal(mine, want) {
			t.Fatalf("writer %d's IDs in the ring: %v", w, mine)
		}
	}
}

// TestMarkedBatchesStayBulk counts the commands a batch sends: unconditional
// puts without a mark on records without one are one bulk update; writes
// with a mark are one find of the hidden fields and one bulk write (one
// command per kind: insert, update, delete); unconditional puts without a
// mark on records with one add one find and one bulk write.
func TestMarkedBatchesStayBulk(t *testing.T) {
	srv := mongotest.Shared(t)
	var mu sync.Mutex
	var cmds []string
	pipelined := false // an update of the batches was a pipeline
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		switch e.CommandName {
		case "find", "insert", "update", "delete":
			mu.Lock()
			cmds = append(cmds, e.CommandName)
			if e.CommandName == "update" {
				st, err := e.Command.LookupErr("updates", "0")
				if err == nil && st.Document().Lookup("u").Type == bson.TypeArray && st.Document().Lookup("q", "_id").Type == bson.TypeString {
					pipelined = true
				}
			}
			mu.Unlock()
		}
	}}
	mc, err := mongo.Connect(options.Client().ApplyURI(srv.URI()).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Disconnect(context.Background()) })
	db := freshDatabase(t, mc)
	ctx := ctxT(t)
	opts := mongodb.Options{}
	if srv.IsFerretDB() {
		opts.BulkChunk, opts.BulkConcurrency = mongodb.FerretDBBulkChunk, mongodb.FerretDBBulkConcurrency
	}
	s := newStore(t, mc, opts)
	const n = 40 // within one FerretDB chunk
	addrs := make([]domain.Address, n)
	for i := range addrs {
		addrs[i] = domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: domain.StringKey(fmt.Sprintf("k%d", i))}
	}
	batch := func(step string, mk func(i int) ports.WriteOp) []string {
		t.Helper()
		mu.Lock()
		cmds = nil
		mu.Unlock()
		ops := make([]ports.WriteOp, n)
		for i := range ops {
			ops[i] = mk(i)
		}
		for i, r := range s.Write(ctx, ops) {
			if r.Err != nil {
				t.Fatalf("%s: op %d: %v", step, i, r.Err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("%s: %v", step, cmds)
		return slices.Clone(cmds)
	}
	put := func(i int) ports.WriteOp {
		return ports.WriteOp{Kind: ports.WritePut, Address: addrs[i], Document: bsonDoc(t, bson.D{{Key: "i", Value: i}})}
	}
	// Half the records exist without a mark.
	for i := 0; i < n; i += 2 {
		if r := s.Write(ctx, []ports.WriteOp{put(i)})[0]; r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if got := batch("unmarked puts, half new", put); !slices.Equal(got, []string{"update"}) {
		t.Fatalf("unmarked puts on records without a mark sent %v, want one update", got)
	}
	got := batch("marked puts", func(i int) ports.WriteOp {
		op := put(i)
		op.Mark = markOf([]string{fmt.Sprintf("m%d", i)}, domain.SourcePosition{Log: "l", Offset: int64(i)}, 8)
		return op
	})
	if !slices.Equal(got, []string{"find", "update"}) {
		t.Fatalf("marked puts on existing records sent %v, want one find and one update", got)
	}
	got = batch("unmarked puts on marked records", put)
	mu.Lock()
	withPipelines := pipelined
	mu.Unlock()
	switch {
	case withPipelines:
		// The server takes update pipelines: the update carries the
		// marks over itself (see keepMarkPipeline).
		if !slices.Equal(got, []string{"update"}) {
			t.Fatalf("unmarked puts on marked records sent %v, want one update (pipelines)", got)
		}
	case got[0] != "update" || !slices.Contains(got, "find"):
		t.Fatalf("unmarked puts on marked records sent %v", got)
	}
	if !withPipelines && !srv.IsFerretDB() && !slices.Equal(got, []string{"update", "find", "update"}) {
		// FerretDB v1 stops an update command at its first failing
		// statement, so the store looks its results up and, from then on,
		// upserts one by one (see bulkCommand).
		t.Fatalf("unmarked puts on marked records sent %v, want update, find, update", got)
	}
	for i, r := range s.Read(ctx, addrs) {
		if r.Err != nil || len(r.Record.Mark.Recent) != 1 || r.Record.Mark.Recent[0].ID != fmt.Sprintf("m%d", i) {
			t.Fatalf("record %d after unmarked puts: %+v", i, r)
		}
	}
	got = batch("marked deletes", func(i int) ports.WriteOp {
		return ports.WriteOp{Kind: ports.WriteDelete, Address: addrs[i], Mark: markOf([]string{fmt.Sprintf("d%d", i)}, domain.SourcePosition{Log: "l", Offset: int64(100 + i)}, 8)}
	})
	if !slices.Equal(got, []string{"find", "delete"}) {
		t.Fatalf("marked deletes sent %v, want one find and one delete", got)
	}
}

// TestMarkLargestDocument: the largest document Validate accepts is written
// with a ring filled with the longest IDs and the longest log identity.
func TestMarkLargestDocument(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	db := freshDatabase(t, c)
	ctx := ctxT(t)
	const ring = 2 // the second write fills it (16 MiB writes are slow on FerretDB)
	s := newStore(t, c, mongodb.Options{MarkRing: ring})
	a := domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: domain.StringKey("big")}
	// {b: binary(n)} is n+13 bytes; the _id "big" takes 13.
	largest := mongodb.MaxDocumentBytes - 13 - 13 - s.ReservedBytes()
	doc := bsonDoc(t, bson.D{{Key: "b", Value: bson.Binary{Data: make([]byte, largest)}}})
	op := ports.WriteOp{Kind: ports.WritePut, Address: a, Document: doc}
	if err := s.Validate(op); err != nil {
		t.Fatal(err)
	}
	log := strings.Repeat("l", domain.MaxLogBytes)
	for i := range ring {
		op.Mark = markOf([]string{strings.Repeat(string(rune('a'+i)), domain.MaxMutationIDBytes)}, domain.SourcePosition{Log: log, Offset: int64(i)}, ring)
		if r := s.Write(ctx, []ports.WriteOp{op})[0]; r.Err != nil {
			t.Fatalf("write %d with a full ring: %v", i, r.Err)
		}
	}
	r := s.Read(ctx, []domain.Address{a})[0]
	if r.Err != nil || len(r.Record.Mark.Recent) != ring || len(r.Record.Document.Data) != len(doc.Data) {
		t.Fatalf("read back: err %v, ring %d, %d bytes", r.Err, len(r.Record.Mark.Recent), len(r.Record.Document.Data))
	}
}

// TestMarkedBatchesConcurrent: writers send batches with a mark over the
// same records at once, so the conditional writes of one batch meet the
// others' (a replace that matches nothing, an insert that collides) and the
// store looks the bulk's outcome up and tries again. Every write must
// succeed once, and each record's ring must hold exactly the IDs written to
// it, with the revisions the writes returned.
func TestMarkedBatchesConcurrent(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	db := freshDatabase(t, c)
	ctx := ctxT(t)
	s := newStore(t, c, mongodb.Options{MarkRing: domain.MaxAppliedRing})
	// Writer w writes records w, w+1 and w+2 (mod 5): its batches overlap
	// the others' in part, so a bulk can match some of its writes only.
	const writers, rounds, records, span = 4, 12, 5, 3
	addrs := make([]domain.Address, records)
	for i := range addrs {
		addrs[i] = domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: domain.StringKey(fmt.Sprintf("r%d", i))}
	}
	var mu sync.Mutex
	applied := make([]map[string]domain.Revision, records)
	for i := range applied {
		applied[i] = map[string]domain.Revision{}
	}
	aborted := 0
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				pending := make([]int, span)
				for k := range pending {
					pending[k] = (w + k) % records
				}
				for attempt := 0; len(pending) > 0; attempt++ {
					if attempt > 20 {
						errs <- fmt.Errorf("writer %d round %d: still aborted after %d attempts", w, r, attempt)
						return
					}
					ops := make([]ports.WriteOp, len(pending))
					for j, i := range pending {
						ops[j] = ports.WriteOp{Kind: ports.WritePut, Address: addrs[i], Document: bsonDoc(t, bson.D{{Key: "w", Value: w}, {Key: "r", Value: r}}),
							Mark: markOf([]string{fmt.Sprintf("w%d-r%d", w, r)}, domain.SourcePosition{}, domain.MaxAppliedRing)}
					}
					var again []int
					for j, res := range s.Write(ctx, ops) {
						i := pending[j]
						switch {
						case res.Err == nil:
							mu.Lock()
							applied[i][fmt.Sprintf("w%d-r%d", w, r)] = res.Revision
							mu.Unlock()
						case domain.CodeOf(res.Err) == domain.CodeAborted:
							mu.Lock()
							aborted++
							mu.Unlock()
							again = append(again, i)
						default:
							errs <- fmt.Errorf("writer %d round %d record %d: %v", w, r, i, res.Err)
							return
						}
					}
					pending = again
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, r := range s.Read(ctx, addrs) {
		if r.Err != nil || !r.Found {
			t.Fatalf("record %d: %+v", i, r)
		}
		ring := r.Record.Mark.Recent
		if len(ring) != len(applied[i]) || len(ring) == 0 {
			t.Fatalf("record %d: ring holds %d IDs, want the %d applied", i, len(ring), len(applied[i]))
		}
		for _, e := range ring {
			if rev, ok := applied[i][e.ID]; !ok || rev != e.Revision {
				t.Fatalf("record %d: ring entry %+v, the write returned %q", i, e, rev)
			}
		}
	}
	t.Logf("%d writers × %d batches of %d records: exact; %d writes aborted and retried", writers, rounds, span, aborted)
}
