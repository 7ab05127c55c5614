package application_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// dedupObserver counts Deduplicated calls and keeps the outcomes.
type dedupObserver struct {
	recordingObserver
	dmu   sync.Mutex
	dedup map[string]int // "worker/duplicate" -> n
}

func (o *dedupObserver) Deduplicated(src ports.OperationSource, c domain.Coverage, n int) {
	o.dmu.Lock()
	defer o.dmu.Unlock()
	if o.dedup == nil {
		o.dedup = map[string]int{}
	}
	name := "request"
	if src == ports.SourceWorker {
		name = "worker"
	}
	o.dedup[name+"/"+c.String()] += n
}

func (o *dedupObserver) deduplicated(key string) int {
	o.dmu.Lock()
	defer o.dmu.Unlock()
	return o.dedup[key]
}

func keyed(m domain.Mutation, key string) domain.Mutation {
	m.ID, m.Keyed = key, true
	return m
}

func del(k string) domain.Mutation {
	return domain.Mutation{Kind: domain.MutationDelete, Address: addr(k)}
}

// queued makes m a queued mutation with id at offset off of partition 0
// of log "L".
func queued(m domain.Mutation, id string, off int64) domain.Mutation {
	m.ID = id
	m.Source = domain.SourcePosition{Log: "L", Partition: 0, Offset: off}
	return m
}

func markedService(t *testing.T, st ports.Storage, obs application.Observer, mutate ...func(*application.Config)) *application.Service {
	t.Helper()
	opts := []application.Option{}
	if obs != nil {
		opts = append(opts, application.WithObserver(obs))
	}
	cfg := application.DefaultConfig()
	cfg.Apply.BaseBackoff, cfg.Apply.MaxBackoff = 0, 0
	for _, m := range mutate {
		m(&cfg)
	}
	s, err := application.NewService(cfg, st, []ports.MergeProfile{addProfile{}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func write1(t *testing.T, s *application.Service, m domain.Mutation) application.WriteResult {
	t.Helper()
	var res []application.WriteResult
	var err error
	if m.Kind == domain.MutationDelete {
		res, err = s.Delete(context.Background(), []domain.Mutation{m}, application.WaitUntilApplied)
	} else {
		res, err = s.Write(context.Background(), []domain.Mutation{m}, application.WaitUntilApplied)
	}
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// A synchronous write retried with the same idempotency key is applied
// once: the retry gets the original outcome (APPLIED with the revision the
// first write produced) and writes nothing; a non-idempotent merge (a
// counter) is not applied twice. A retried delete finds no record (the
// delete removed the record with its mark: the documented window).
func TestKeyedSyncRetryIsAppliedOnce(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batching=%v", batch), func(t *testing.T) {
			obs := &dedupObserver{}
			rec := &recorder{Storage: memory.New()}
			s := markedService(t, rec, obs, func(c *application.Config) { c.Batch.Enabled = batch })

			first := write1(t, s, keyed(put("k", 10), "put-1"))
			again := write1(t, s, keyed(put("k", 99), "put-1")) // the retry of a lost answer
			if first.Status != application.StatusApplied || first.Skipped {
				t.Fatalf("first put: %+v", first)
			}
			if again.Status != application.StatusApplied || !again.Skipped || again.Revision != first.Revision {
				t.Fatalf("retried put: %+v, want APPLIED with the first revision %v", again, first.Revision)
			}
			if n := value(t, s, "k"); n != 10 {
				t.Fatalf("record holds %d after the retried put, want 10", n)
			}

			m1 := write1(t, s, keyed(merge("k", 5), "merge-1"))
			for i := 0; i < 3; i++ {
				r := write1(t, s, keyed(merge("k", 5), "merge-1"))
				if r.Status != application.StatusApplied || !r.Skipped || r.Revision != m1.Revision {
					t.Fatalf("retried merge %d: %+v, want APPLIED with revision %v", i, r, m1.Revision)
				}
			}
			if n := value(t, s, "k"); n != 15 {
				t.Fatalf("counter holds %d after 4 sends of one keyed +5 merge, want 15", n)
			}
			// The first put's key is still remembered behind the merge's.
			if r := write1(t, s, keyed(put("k", 1), "put-1")); !r.Skipped || r.Revision != first.Revision {
				t.Fatalf("put retried after a merge: %+v", r)
			}
			// A different key is a different change.
			if r := write1(t, s, keyed(merge("k", 1), "merge-2")); r.Status != application.StatusApplied || r.Skipped {
				t.Fatalf("new key: %+v", r)
			}
			if n := value(t, s, "k"); n != 16 {
				t.Fatalf("counter holds %d, want 16", n)
			}

			d := write1(t, s, keyed(del("k"), "del-1"))
			if d.Status != application.StatusApplied {
				t.Fatalf("delete: %+v", d)
			}
			if r := write1(t, s, keyed(del("k"), "del-1")); r.Status != application.StatusNotFound {
				t.Fatalf("retried delete: %+v, want NOT_FOUND (the delete removed the record and its mark)", r)
			}
			if got := obs.deduplicated("request/duplicate"); got != 5 {
				t.Fatalf("deduplicated{request,duplicate} = %d, want 5", got)
			}
			// Only keyed writes carry a mark.
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, call := range rec.writes {
				for _, op := range call {
					if op.Mark == nil || len(op.Mark.IDs) != 1 || !op.Mark.Position.IsZero() || op.Mark.Keep != domain.DefaultAppliedRing {
						t.Fatalf("keyed sync write with mark %+v, want one id, no position, the default ring", op.Mark)
					}
				}
			}
		})
	}
}

// Without a key, a synchronous write carries no mark and keeps the one the
// worker left: a redelivery of the queued mutation is still recognised.
func TestUnkeyedSyncPutKeepsTheMark(t *testing.T) {
	mem := memory.New()
	rec := &recorder{Storage: mem}
	s := markedService(t, rec, nil)
	ctx := context.Background()
	if out := s.ApplyMutations(ctx, []domain.Mutation{queued(put("k", 1), "q-1", 7)}); out[0].Err != nil || out[0].Skipped {
		t.Fatalf("queued put: %+v", out[0])
	}
	if r := write1(t, s, put("k", 2)); r.Status != application.StatusApplied {
		t.Fatalf("sync put: %+v", r)
	}
	if r := write1(t, s, merge("k", 3)); r.Status != application.StatusApplied {
		t.Fatalf("sync merge: %+v", r)
	}
	rec.mu.Lock()
	for _, call := range rec.writes[1:] {
		if call[0].Mark != nil {
			t.Fatalf("unkeyed sync write carries mark %+v", call[0].Mark)
		}
	}
	rec.mu.Unlock()
	out := s.ApplyMutations(ctx, []domain.Mutation{queued(put("k", 1), "q-1", 7)})
	if out[0].Err != nil || !out[0].Skipped {
		t.Fatalf("redelivered put after sync writes: %+v, want skipped", out[0])
	}
	if n := value(t, s, "k"); n != 5 {
		t.Fatalf("record holds %d, want the sync writes' 5", n)
	}
	var m domain.AppliedMark
	for _, r := range mem.Snapshot() {
		m = r.Mark
	}
	if _, ok := m.Find("q-1"); !ok || m.Position.Offset != 7 {
		t.Fatalf("mark after sync writes: %+v", m)
	}
}

// A queued write with a client's key is queued under that key: the
// result's mutation id is the key.
func TestAsyncKeyedMutationIDIsTheKey(t *testing.T) {
	q := &fakeQueue{}
	s, err := application.NewService(application.DefaultConfig(), memory.New(), []ports.MergeProfile{addProfile{}}, application.WithQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Write(context.Background(), []domain.Mutation{keyed(merge("k", 1), "order-7/pay"), merge("k", 2)}, application.ReturnAfterAccepted)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != application.StatusAccepted || res[0].MutationID != "order-7/pay" {
		t.Fatalf("keyed: %+v", res[0])
	}
	if res[1].Status != application.StatusAccepted || res[1].MutationID == "" || res[1].MutationID == "order-7/pay" {
		t.Fatalf("unkeyed: %+v", res[1])
	}
	if q.got[0].ID != "order-7/pay" || !q.got[0].Keyed {
		t.Fatalf("queued %+v", q.got[0])
	}
	dres, err := s.Delete(context.Background(), []domain.Mutation{keyed(del("k"), "del-k")}, application.ReturnAfterAccepted)
	if err != nil || dres[0].MutationID != "del-k" {
		t.Fatalf("keyed delete: %v %+v", err, dres)
	}
}

// Applying the same batch twice (a redelivery after a crash or a
// rebalance) changes nothing the second time: every put and merge is
// skipped, reported applied with the first run's revision, counted apart
// from new applications; a counter merge is applied once.
func TestApplySameBatchTwiceSkipsTheSecond(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batching=%v", batch), func(t *testing.T) {
			obs := &dedupObserver{}
			var logs bytes.Buffer
			cfg := application.DefaultConfig()
			cfg.Batch.Enabled = batch
			s, err := application.NewService(cfg, memory.New(), []ports.MergeProfile{addProfile{}}, application.WithObserver(obs),
				application.WithLogger(slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
			if err != nil {
				t.Fatal(err)
			}
			b := []domain.Mutation{
				queued(put("a", 1), "m0", 0),
				queued(merge("c", 1), "m1", 1), queued(merge("c", 2), "m2", 2), queued(merge("c", 4), "m3", 3),
				queued(put("b", 10), "m4", 4), queued(merge("b", 5), "m5", 5),
			}
			first := s.ApplyMutations(context.Background(), b)
			revs := map[string]domain.Revision{}
			for i, o := range first {
				if o.Err != nil || o.Skipped {
					t.Fatalf("first run, mutation %d: %+v", i, o)
				}
			}
			for _, k := range []string{"a", "b", "c"} {
				r, _ := s.Read(context.Background(), []domain.Address{addr(k)})
				revs[k] = r[0].Record.Revision
			}
			second := s.ApplyMutations(context.Background(), b)
			for i, o := range second {
				if o.Err != nil || !o.Skipped {
					t.Fatalf("second run, mutation %d: %+v, want skipped", i, o)
				}
			}
			if a, bb, c := value(t, s, "a"), value(t, s, "b"), value(t, s, "c"); a != 1 || bb != 15 || c != 7 {
				t.Fatalf("records a=%d b=%d c=%d, want 1 15 7", a, bb, c)
			}
			for _, k := range []string{"a", "b", "c"} {
				r, _ := s.Read(context.Background(), []domain.Address{addr(k)})
				if r[0].Record.Revision != revs[k] {
					t.Fatalf("record %s was written again by the redelivery", k)
				}
			}
			if got := obs.deduplicated("worker/duplicate"); got != len(b) {
				t.Fatalf("deduplicated{worker,duplicate} = %d, want %d", got, len(b))
			}
			applied := obs.count(func(o ports.OperationOutcome) bool {
				return o.Source == ports.SourceWorker && o.Status == ports.StatusApplied
			})
			skipped := obs.count(func(o ports.OperationOutcome) bool {
				return o.Source == ports.SourceWorker && o.Status == ports.StatusSkipped
			})
			if applied != len(b) || skipped != len(b) {
				t.Fatalf("worker outcomes: %d applied, %d skipped, want %d each", applied, skipped, len(b))
			}
			lines := 0
			for _, l := range logLines(t, logs.Bytes()) {
				if l["coverage"] == "duplicate" {
					lines++
					if l["mutation_id"] == "" || l["level"] != "DEBUG" || strings.Contains(fmt.Sprint(l), `"N"`) {
						t.Fatalf("skip log line %v", l)
					}
				}
			}
			if lines != len(b) {
				t.Fatalf("%d skip log lines, want %d", lines, len(b))
			}
		})
	}
}

// Redeliveries of counter merges mixed with new ones, in overlapping
// batches: each merge applies exactly once.
func TestRedeliveredCounterMergesApplyOnce(t *testing.T) {
	s := markedService(t, memory.New(), nil)
	m := func(i int) domain.Mutation { return queued(merge("c", 1<<i), fmt.Sprintf("m%d", i), int64(i)) }
	batches := [][]domain.Mutation{
		{m(0), m(1), m(2)},
		{m(1), m(2), m(3), m(4)}, // a rebalance redelivers from offset 1
		{m(0), m(1), m(2), m(3), m(4), m(5)},
		{m(5)},
	}
	for bi, b := range batches {
		for i, o := range s.ApplyMutations(context.Background(), b) {
			if o.Err != nil {
				t.Fatalf("batch %d mutation %d: %v", bi, i, o.Err)
			}
		}
	}
	if n := value(t, s, "c"); n != 1<<6-1 {
		t.Fatalf("counter %d, want %d (each of 6 merges once)", n, 1<<6-1)
	}
}

// A fold of merges some of which were applied before: those are skipped
// (reported applied with the revision of the write that applied them),
// their profiles are not run, the others apply in one read and one write;
// the same mutation twice in one fold (a dead-letter replay next to its
// original) applies once.
func TestFoldWithDuplicateMembers(t *testing.T) {
	rec := &recorder{Storage: memory.New()}
	obs := &dedupObserver{}
	s := markedService(t, rec, obs)
	ctx := context.Background()
	first := s.ApplyMutations(ctx, []domain.Mutation{queued(merge("c", 1), "m1", 1), queued(merge("c", 2), "m2", 2)})
	if first[0].Err != nil || first[1].Err != nil {
		t.Fatal(first)
	}
	rec.mu.Lock()
	rec.writes, rec.reads = nil, nil
	rec.mu.Unlock()
	// m3 replayed from the dead-letter topic at offset 9, in the same batch.
	replay := queued(merge("c", 4), "m3", 9)
	out := s.ApplyMutations(ctx, []domain.Mutation{
		queued(merge("c", 1), "m1", 1), queued(merge("c", 2), "m2", 2), queued(merge("c", 4), "m3", 3), queued(merge("c", 8), "m4", 4), replay,
	})
	for i, o := range out {
		if o.Err != nil {
			t.Fatalf("mutation %d: %v", i, o.Err)
		}
		if want := i < 2 || i == 4; o.Skipped != want {
			t.Fatalf("mutation %d skipped=%v, want %v", i, o.Skipped, want)
		}
	}
	rec.mu.Lock()
	reads, writes := len(rec.reads), len(rec.writes)
	w := rec.writes[0][0]
	rec.mu.Unlock()
	if reads != 1 || writes != 1 {
		t.Fatalf("%d reads and %d writes, want one each (one fold)", reads, writes)
	}
	if w.Mark == nil || strings.Join(w.Mark.IDs, ",") != "m3,m4" || w.Mark.Position.Offset != 4 || w.Mark.Base == nil {
		t.Fatalf("fold write mark %+v, want ids m3,m4 at offset 4 with the read mark as base", w.Mark)
	}
	if _, ok := w.Mark.Base.Find("m2"); !ok || w.Mark.Base.Position.Offset != 2 {
		t.Fatalf("fold write base %+v", w.Mark.Base)
	}
	if n := value(t, s, "c"); n != 15 {
		t.Fatalf("counter %d, want 15", n)
	}
	if out[0].Attempts != 1 || out[4].Skipped != true {
		t.Fatalf("outcomes %+v", out)
	}
	if got := obs.deduplicated("worker/duplicate"); got != 3 {
		t.Fatalf("deduplicated = %d, want 3", got)
	}
}

// The revision a skipped merge reports is the one its own write produced.
func TestSkippedMergeReportsItsOriginalRevision(t *testing.T) {
	s := markedService(t, memory.New(), nil)
	ctx := context.Background()
	write1(t, s, keyed(merge("c", 1), "k1"))
	r, _ := s.Read(ctx, []domain.Address{addr("c")})
	rev1 := r[0].Record.Revision
	write1(t, s, keyed(merge("c", 1), "k2"))
	res, err := s.Write(ctx, []domain.Mutation{keyed(merge("c", 1), "k1"), keyed(merge("c", 1), "k3")}, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Skipped || res[0].Revision != rev1 || res[1].Skipped || res[1].Revision == rev1 {
		t.Fatalf("results %+v, want the retried k1 with its own revision, k3 new", res)
	}
	if n := value(t, s, "c"); n != 3 {
		t.Fatalf("counter %d, want 3", n)
	}
}

// A queued mutation whose position the record's mark already passed, with
// an ID the ring does not hold, is never applied: under the log's order
// some worker handled it before, so it is skipped (Superseded), at once,
// and never reported as a failure (the worker would dead-letter a failure:
// a dead letter is only ever a mutation that was not applied).
func TestSupersededMutationIsSkipped(t *testing.T) {
	obs := &dedupObserver{}
	s := markedService(t, memory.New(), obs)
	ctx := context.Background()
	if out := s.ApplyMutations(ctx, []domain.Mutation{queued(put("p", 5), "new-p", 50), queued(put("c", 5), "new-c", 51)}); out[0].Err != nil || out[1].Err != nil {
		t.Fatal(out)
	}
	out := s.ApplyMutations(ctx, []domain.Mutation{
		queued(put("p", 1), "old-p", 40), queued(merge("c", 1), "old-c", 41), queued(del("p"), "old-d", 42),
	})
	for i, o := range out {
		if o.Err != nil || !o.Skipped || !o.Superseded || o.Attempts != 1 {
			t.Fatalf("mutation %d: %+v, want skipped as superseded at the first attempt", i, o)
		}
	}
	if p, c := value(t, s, "p"), value(t, s, "c"); p != 5 || c != 5 {
		t.Fatalf("records p=%d c=%d, want both 5 (nothing applied out of order)", p, c)
	}
	if got := obs.deduplicated("worker/superseded"); got != 3 {
		t.Fatalf("deduplicated{worker,superseded} = %d, want 3", got)
	}
	// Another partition or another log never covers: applied.
	other := queued(put("p", 7), "other", 1)
	other.Source.Partition = 3
	if o := s.ApplyMutations(ctx, []domain.Mutation{other}); o[0].Err != nil || o[0].Skipped {
		t.Fatalf("mutation of another partition: %+v", o[0])
	}
}

func TestInvalidIdempotencyKeys(t *testing.T) {
	s := markedService(t, memory.New(), nil)
	for _, c := range []struct {
		name, key, want string
	}{
		{"empty", "", "must not be empty"},
		{"too long", strings.Repeat("k", domain.MaxMutationIDBytes+1), "is 129 bytes; the limit is 128"},
		{"space", "a b", "byte 1 is not printable ASCII"},
		{"control", "a\tb", "byte 1 is not printable ASCII"},
		{"non-ASCII", "clé", "byte 2 is not printable ASCII"},
	} {
		for _, m := range []domain.Mutation{put("k", 1), merge("k", 1), del("k")} {
			r := write1(t, s, keyed(m, c.key))
			want := "operations[0] (" + m.Kind.String() + "): idempotency_key: " + c.want
			if r.Err == nil || r.Err.Code != domain.CodeInvalidArgument || !strings.HasPrefix(r.Err.Message, want) {
				t.Fatalf("%s key on a %s: %+v, want %q", c.name, m.Kind, r.Err, want)
			}
		}
	}
	if r := write1(t, s, keyed(put("k", 1), strings.Repeat("~", domain.MaxMutationIDBytes))); r.Err != nil {
		t.Fatalf("a key of 128 printable bytes: %v", r.Err)
	}

	// The same key twice on one record in one request: both fail, each
	// naming the other; on different records a key is fine.
	res, err := s.Write(context.Background(), []domain.Mutation{
		keyed(put("x", 1), "dup"), keyed(put("y", 1), "dup"), keyed(merge("x", 2), "dup"), keyed(put("z", 1), "z"),
	}, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	if e := res[0].Err; e == nil || e.Code != domain.CodeInvalidArgument || !strings.HasPrefix(e.Message, "operations[0] (put): idempotency_key: is also the idempotency key of operations[2] on the same record") {
		t.Fatalf("first of the pair: %+v", res[0])
	}
	if e := res[2].Err; e == nil || e.Code != domain.CodeInvalidArgument || !strings.HasPrefix(e.Message, "operations[2] (merge): idempotency_key: is also the idempotency key of operations[0] on the same record") {
		t.Fatalf("second of the pair: %+v", res[2])
	}
	if res[1].Status != application.StatusApplied || res[3].Status != application.StatusApplied {
		t.Fatalf("other operations: %+v %+v", res[1], res[3])
	}
	rr, _ := s.Read(context.Background(), []domain.Address{addr("x")})
	if rr[0].Status != application.StatusNotFound {
		t.Fatal("an operation of a repeated key was applied")
	}

	// The worker refuses mutation ids its records' marks cannot hold.
	long := queued(put("w", 1), strings.Repeat("i", domain.MaxMutationIDBytes+1), 1)
	if o := s.ApplyMutations(context.Background(), []domain.Mutation{long}); domain.CodeOf(o[0].Err) != domain.CodeInvalidArgument {
		t.Fatalf("over-long queued mutation id: %+v", o[0])
	}
}

func TestIdempotencyRingIsValidatedAndUsed(t *testing.T) {
	for _, n := range []int{0, -1, domain.MaxAppliedRing + 1} {
		cfg := application.DefaultConfig()
		cfg.IdempotencyRing = n
		if _, err := application.NewService(cfg, memory.New(), nil); err == nil || !strings.Contains(err.Error(), "idempotency ring") {
			t.Fatalf("ring %d: %v", n, err)
		}
	}
	s := markedService(t, memory.New(), nil, func(c *application.Config) { c.IdempotencyRing = 2 })
	for i := 1; i <= 3; i++ {
		write1(t, s, keyed(merge("c", 1), fmt.Sprintf("k%d", i)))
	}
	// k3 and k2 are remembered; k1 fell out of the ring of 2: the window.
	if r := write1(t, s, keyed(merge("c", 1), "k2")); !r.Skipped {
		t.Fatalf("k2: %+v", r)
	}
	if r := write1(t, s, keyed(merge("c", 1), "k1")); r.Skipped {
		t.Fatalf("k1 outside the ring was skipped: %+v", r)
	}
	if n := value(t, s, "c"); n != 4 {
		t.Fatalf("counter %d, want 4", n)
	}
}

// Natural batching with marks: concurrent worker batches that redeliver
// each other's counter merges, synchronous keyed retries and unkeyed
// merges on the same records: every change applies exactly once.
func TestConcurrentRedeliveriesWithBatchingApplyOnce(t *testing.T) {
	obs := &dedupObserver{}
	s := markedService(t, memory.New(), obs, func(c *application.Config) {
		c.Batch = application.BatchPolicy{Enabled: true, MaxOps: 1000, Shards: 2}
		c.Merge.MaxAttempts = 1000
		// Exactly once holds within the ring's window. Each record sees 50
		// ids in all (40 queued, 10 keyed); with the default 32 an unlucky
		// schedule (a worker applying 40 ids of a record while a client's
		// retry waits) evicted a key before its retry and the retry applied
		// again, as documented. 64 keeps the whole test inside the window.
		c.IdempotencyRing = 64
	})
	const records, perRecord = 4, 40
	ctx := context.Background()
	var wg sync.WaitGroup
	// Two "workers" apply the same log (a stale and a current owner),
	// each in batches of 10 mutations.
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for start := 0; start < perRecord; start += 10 {
				var b []domain.Mutation
				for i := start; i < start+10; i++ {
					for r := 0; r < records; r++ {
						off := int64(i*records + r)
						m := queued(merge(fmt.Sprintf("r%d", r), 1), fmt.Sprintf("q-%d", off), off)
						m.Source.Partition = int32(r)
						b = append(b, m)
					}
				}
				for i, o := range s.ApplyMutations(ctx, b) {
					// (Superseded, skipped, would be the answer for a
					// worker so far behind that its ids left the ring.)
					if o.Err != nil {
						t.Errorf("worker batch at %d, mutation %d: %v", start, i, o.Err)
					}
				}
			}
		}()
	}
	// Clients: each keyed merge sent twice, and unkeyed merges.
	for c := 0; c < 2; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				k := fmt.Sprintf("r%d", i%records)
				key := fmt.Sprintf("c%d-%d", c, i)
				for try := 0; try < 2; try++ {
					res, err := s.Write(ctx, []domain.Mutation{keyed(merge(k, 1000), key), merge(k, 1000000)}, application.WaitUntilApplied)
					if err != nil || res[0].Err != nil || res[1].Err != nil {
						t.Errorf("client write: %v %+v", err, res)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for r := 0; r < records; r++ {
		total += value(t, s, fmt.Sprintf("r%d", r))
	}
	// Per record: perRecord queued +1, 10 keyed +1000 (once each), 20
	// unkeyed +1000000 (each try is a new change).
	if want := records * (perRecord + 10*1000 + 20*1000000); total != want {
		t.Fatalf("total %d, want %d", total, want)
	}
	if got := obs.deduplicated("worker/duplicate") + obs.deduplicated("worker/superseded"); got != records*perRecord {
		t.Fatalf("worker skips %d, want %d (one redelivery of each queued merge)", got, records*perRecord)
	}
	if got := obs.deduplicated("request/duplicate"); got != 40 {
		t.Fatalf("request skips %d, want 40", got)
	}
}

// lostAnswer applies the first write call but answers it with an unknown
// outcome (a timeout after the write reached storage).
type lostAnswer struct {
	ports.Storage
	mu   sync.Mutex
	lost bool
}

func (l *lostAnswer) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	out := l.Storage.Write(ctx, ops)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lost {
		l.lost = true
		for i := range out {
			out[i] = ports.WriteResult{Err: &domain.Error{Code: domain.CodeOutcomeUnknown, Message: "timeout", Retryable: true}}
		}
	}
	return out
}

// An unknown outcome is retryable for any mutation whose ID its record's
// mark records (a keyed write, every queued mutation), merges included:
// the retry finds the ID and does not apply the merge again.
func TestUnknownOutcomeOfAMarkedMergeIsRetryable(t *testing.T) {
	s := markedService(t, &lostAnswer{Storage: memory.New()}, nil)
	r := write1(t, s, keyed(merge("c", 5), "k"))
	if r.Err == nil || r.Err.Code != domain.CodeOutcomeUnknown || !r.Err.Retryable {
		t.Fatalf("lost answer: %+v, want a retryable unknown outcome", r.Err)
	}
	if r := write1(t, s, keyed(merge("c", 5), "k")); r.Status != application.StatusApplied || !r.Skipped {
		t.Fatalf("retry: %+v", r)
	}
	if r := write1(t, s, merge("c", 1)); r.Err != nil {
		t.Fatal(r.Err)
	}
	if n := value(t, s, "c"); n != 6 {
		t.Fatalf("counter %d, want 6", n)
	}

	w := markedService(t, &lostAnswer{Storage: memory.New()}, nil)
	out := w.ApplyMutations(context.Background(), []domain.Mutation{queued(merge("c", 5), "q", 1)})
	if out[0].Err != nil || out[0].Attempts != 2 || !out[0].Skipped {
		t.Fatalf("worker: %+v, want applied at the second attempt, found already applied", out[0])
	}
	if n := value(t, w, "c"); n != 5 {
		t.Fatalf("counter %d, want 5", n)
	}
	// Without a key a merge's unknown outcome stays non-retryable.
	u := markedService(t, &lostAnswer{Storage: memory.New()}, nil)
	if r := write1(t, u, merge("c", 5)); r.Err == nil || r.Err.Retryable {
		t.Fatalf("unkeyed merge: %+v", r.Err)
	}
}
