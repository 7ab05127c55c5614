package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc/codes"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/bootstrap/cli"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/countprofile"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	"github.com/sink-io/sink/ports"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// Effectively once per record: dead-letter replays and client retries with
// an idempotency key are applied once. Every test uses a counter merge (the
// "count" profile: n += add, the intent's id appended to ids), which is not
// idempotent, so a second application shows in the document.

// countCodec builds operations of the "count" merge profile and reads
// counters in one content type: JSON (memory storage) or BSON (MongoDB).
type countCodec string

const (
	countJSON = countCodec(domain.ContentTypeJSON)
	countBSON = countCodec(domain.ContentTypeBSON)
)

func (cc countCodec) doc(t testing.TB, v any) *sinkv1.Document {
	t.Helper()
	d, err := countprofile.Encode(string(cc), v)
	if err != nil {
		t.Fatal(err)
	}
	return &sinkv1.Document{ContentType: d.ContentType, Data: d.Data}
}

// merge is a merge through profile adding 1 and the tag, with an
// idempotency key (none when key is empty).
func (cc countCodec) merge(t testing.TB, a *sinkv1.RecordAddress, profile, tag, key string) *sinkv1.WriteOperation {
	return &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{
		Address: a, Profile: profile, Intent: cc.doc(t, countprofile.Intent{Add: 1, ID: tag}), IdempotencyKey: key}}}
}

// put is an upsert of the counter {n, ids} with an idempotency key (none
// when key is empty).
func (cc countCodec) put(t testing.TB, a *sinkv1.RecordAddress, n int, ids []string, key string) *sinkv1.WriteOperation {
	return &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{
		Address: a, Document: cc.doc(t, countprofile.Counter{N: n, IDs: ids}), Mode: sinkv1.PutMode_PUT_MODE_UPSERT, IdempotencyKey: key}}}
}

// counter reads the record's counter and its revision (zero counter and
// nil revision when absent).
func (cc countCodec) counter(t testing.TB, c sinkv1.SinkClient, a *sinkv1.RecordAddress) (countprofile.Counter, []byte) {
	t.Helper()
	r := read(t, c, a)[0]
	switch r.GetStatus() {
	case notFound:
		return countprofile.Counter{}, nil
	case found:
		var got countprofile.Counter
		d := domain.Document{ContentType: r.GetDocument().GetContentType(), Data: r.GetDocument().GetData()}
		if err := countprofile.Decode(d, &got); err != nil {
			t.Fatalf("decoding the counter: %v", err)
		}
		return got, r.GetRevision()
	default:
		t.Fatalf("read: %v %v", r.GetStatus(), r.GetError())
		return countprofile.Counter{}, nil
	}
}

// expect fails unless the record's counter holds exactly tags, in this
// order, with n equal to their number.
func (cc countCodec) expect(t testing.TB, c sinkv1.SinkClient, a *sinkv1.RecordAddress, what string, tags ...string) {
	t.Helper()
	got, _ := cc.counter(t, c, a)
	if got.N != len(tags) || !slices.Equal(got.IDs, tags) {
		t.Fatalf("%s: counter n=%d ids=%v, want n=%d ids=%v", what, got.N, got.IDs, len(tags), tags)
	}
}

// eventuallyTagged waits until the record's counter holds tag (queued
// mutations of one record are applied in order, so every mutation queued
// for it before tag has then been applied or skipped).
func (cc countCodec) eventuallyTagged(t testing.TB, c sinkv1.SinkClient, a *sinkv1.RecordAddress, tag string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("the merge tagged %q to be applied", tag), func() (bool, string) {
		got, _ := cc.counter(t, c, a)
		return slices.Contains(got.IDs, tag), fmt.Sprintf("n=%d ids=%v", got.N, got.IDs)
	})
}

// A client that retries a synchronous write with the same idempotency key
// gets the original outcome — APPLIED with the revision the first attempt
// produced, even after later writes — and the write is applied once. The
// window is the ring (SINK_IDEMPOTENCY_RING, 4 here) and the scope one
// record; a delete removes what the record remembers. On memory storage
// and on the MongoDB-wire server.
func TestIdempotencyKeySyncRetryAppliedOnce(t *testing.T) {
	env := map[string]string{"SINK_IDEMPOTENCY_RING": "4", "SINK_LOG_LEVEL": "warn"}
	t.Run("memory", func(t *testing.T) {
		s := sinktest.Start(t, env, bootstrap.MergeProfile(countprofile.New))
		testIdempotencySync(t, s.Client, countJSON, "once")
	})
	t.Run("mongodb", func(t *testing.T) {
		mongo := mongotest.Shared(t)
		menv := maps.Clone(env)
		maps.Copy(menv, mongo.SinkEnv())
		s := sinktest.Start(t, menv, bootstrap.MergeProfile(countprofile.New))
		testIdempotencySync(t, s.Client, countBSON, mongotest.DatabaseName(t))
	})
}

func testIdempotencySync(t *testing.T, c sinkv1.SinkClient, cc countCodec, ns string) {
	r := addr(ns, "sync", "r1")

	first := write(t, c, cc.merge(t, r, "count", "a", "key-a"))[0]
	expectApplied(t, "first attempt", first)
	again := write(t, c, cc.merge(t, r, "count", "a", "key-a"))[0]
	expectApplied(t, "retry", again)
	if !bytes.Equal(again.GetRevision(), first.GetRevision()) {
		t.Fatalf("the retry answered revision %q, want the first attempt's %q", again.GetRevision(), first.GetRevision())
	}
	cc.expect(t, c, r, "after a retry", "a")

	// A later write, then a retry of the first: still the original outcome.
	b := write(t, c, cc.merge(t, r, "count", "b", "key-b"))[0]
	expectApplied(t, "second key", b)
	if bytes.Equal(b.GetRevision(), first.GetRevision()) {
		t.Fatal("a new write kept the revision")
	}
	late := write(t, c, cc.merge(t, r, "count", "a", "key-a"))[0]
	expectApplied(t, "late retry", late)
	if !bytes.Equal(late.GetRevision(), first.GetRevision()) {
		t.Fatalf("a late retry answered revision %q, want the first attempt's %q (not the current %q)", late.GetRevision(), first.GetRevision(), b.GetRevision())
	}
	cc.expect(t, c, r, "after a late retry", "a", "b")

	// Retries of both keys in one request (one fold) with a new key: the
	// retries answer their original revisions, the new key is applied.
	res := write(t, c, cc.merge(t, r, "count", "a", "key-a"), cc.merge(t, r, "count", "b", "key-b"), cc.merge(t, r, "count", "c", "key-c"))
	for i, x := range res {
		expectApplied(t, fmt.Sprintf("mixed request, operation %d", i), x)
	}
	if !bytes.Equal(res[0].GetRevision(), first.GetRevision()) || !bytes.Equal(res[1].GetRevision(), b.GetRevision()) {
		t.Errorf("mixed request: retries answered %q and %q, want %q and %q", res[0].GetRevision(), res[1].GetRevision(), first.GetRevision(), b.GetRevision())
	}
	cc.expect(t, c, r, "after the mixed request", "a", "b", "c")
	// One key twice for one record in one request names two changes with
	// one key: both are refused, nothing is written.
	for i, x := range write(t, c, cc.merge(t, r, "count", "d", "key-d"), cc.merge(t, r, "count", "d", "key-d")) {
		expectFailure(t, fmt.Sprintf("one key twice in a request, operation %d", i), x.GetStatus(), x.GetError(), failedStatus, uint32(codes.InvalidArgument), "idempotency_key")
	}
	cc.expect(t, c, r, "after one key twice in a request", "a", "b", "c")

	// A put with a key: a retry after a later change does not overwrite it.
	p := addr(ns, "sync", "put")
	put := write(t, c, cc.put(t, p, 10, []string{"put"}, "key-put"))[0]
	expectApplied(t, "keyed put", put)
	expectApplied(t, "merge after the put", write(t, c, cc.merge(t, p, "count", "m", ""))[0])
	retried := write(t, c, cc.put(t, p, 10, []string{"put"}, "key-put"))[0]
	expectApplied(t, "put retry", retried)
	if !bytes.Equal(retried.GetRevision(), put.GetRevision()) {
		t.Errorf("put retry answered revision %q, want %q", retried.GetRevision(), put.GetRevision())
	}
	if got, _ := cc.counter(t, c, p); got.N != 11 || !slices.Equal(got.IDs, []string{"put", "m"}) {
		t.Fatalf("a retried put overwrote a later change: n=%d ids=%v, want n=11 ids=[put m]", got.N, got.IDs)
	}
	// A synchronous write without a key keeps what the record remembers.
	expectApplied(t, "unkeyed put", write(t, c, cc.put(t, p, 1, []string{"plain"}, ""))[0])
	if again := write(t, c, cc.put(t, p, 10, []string{"put"}, "key-put"))[0]; !bytes.Equal(again.GetRevision(), put.GetRevision()) {
		t.Errorf("after an unkeyed put, a retry answered revision %q, want %q (the unkeyed write wiped the mark)", again.GetRevision(), put.GetRevision())
	}
	cc.expect(t, c, p, "after an unkeyed put and a retry", "plain")

	// The window: the ring remembers the last 4 keys of the record.
	w := addr(ns, "sync", "window")
	expectApplied(t, "window key 0", write(t, c, cc.merge(t, w, "count", "w0", "win-0"))[0])
	for i := 1; i <= 3; i++ {
		expectApplied(t, "window key", write(t, c, cc.merge(t, w, "count", fmt.Sprintf("w%d", i), fmt.Sprintf("win-%d", i)))[0])
	}
	expectApplied(t, "retry within the window", write(t, c, cc.merge(t, w, "count", "w0", "win-0"))[0])
	cc.expect(t, c, w, "a retry within the window (ring of 4)", "w0", "w1", "w2", "w3")
	expectApplied(t, "window key 4", write(t, c, cc.merge(t, w, "count", "w4", "win-4"))[0])
	expectApplied(t, "retry outside the window", write(t, c, cc.merge(t, w, "count", "w0", "win-0"))[0])
	cc.expect(t, c, w, "a retry after 4 later keys (outside the documented window: applied again)", "w0", "w1", "w2", "w3", "w4", "w0")

	// The scope is one record: the same key on another record is another
	// operation.
	other := addr(ns, "sync", "other")
	expectApplied(t, "same key, other record", write(t, c, cc.merge(t, other, "count", "a", "key-a"))[0])
	cc.expect(t, c, other, "the same key on another record", "a")

	// A delete with a key; its retry finds no record (NOT_FOUND, no error).
	d := addr(ns, "sync", "deleted")
	expectApplied(t, "record to delete", write(t, c, cc.merge(t, d, "count", "x", "key-x"))[0])
	del := func() *sinkv1.DeleteResult {
		resp, err := c.Delete(ctx(t), &sinkv1.DeleteRequest{Operations: []*sinkv1.DeleteOperation{{Address: d, IdempotencyKey: "key-del"}}})
		if err != nil {
			t.Fatalf("Delete: %v", err)
		}
		return resp.GetResults()[0]
	}
	if r := del(); r.GetStatus() != applied || r.GetError() != nil {
		t.Fatalf("keyed delete: %v %v", r.GetStatus(), r.GetError())
	}
	if r := del(); r.GetStatus() != notFound || r.GetError() != nil {
		t.Fatalf("retried keyed delete: %v %v, want NOT_FOUND without an error", r.GetStatus(), r.GetError())
	}
	// The documented exception: the delete removed the record's mark, so a
	// retry of the write before it is applied again.
	expectApplied(t, "retry of a write before the delete", write(t, c, cc.merge(t, d, "count", "x", "key-x"))[0])
	cc.expect(t, c, d, "a retry of a write made before a delete (documented: a delete forgets the keys)", "x")
}

// A client that retries an asynchronous write with the same idempotency
// key — at once (the copies can share a worker batch), after the worker
// applied it, and synchronously — gets it applied once: the key is the
// queued mutation's id, and the synchronous retry answers the revision the
// worker's write produced.
func TestIdempotencyKeyAsyncRetryAppliedOnce(t *testing.T) {
	asyncSkipShort(t)
	brokers := kafkatest.InProcess(t, kafkatest.Topics(asyncTopic, asyncDLT), kafkatest.Partitions(2))
	s := asyncStartAll(t, brokers, nil, bootstrap.MergeProfile(newCountingProfile))
	c := s.Client
	r := addr("once", "async", "r1")

	// Three copies in a row, as a client retrying after timeouts would send.
	for i := range 3 {
		if ids := asyncMustAccept(t, c, countJSON.merge(t, r, "count", "a", "akey-a")); ids[0] != "akey-a" {
			t.Fatalf("copy %d: mutation id %q, want the idempotency key", i, ids[0])
		}
	}
	countJSON.eventuallyTagged(t, c, r, "a")
	_, revA := countJSON.counter(t, c, r)

	// A synchronous retry of the applied async write: its original outcome,
	// the revision the worker's write produced, and nothing written.
	sync := write(t, c, countJSON.merge(t, r, "count", "a", "akey-a"))[0]
	expectApplied(t, "synchronous retry of an async write", sync)
	if !bytes.Equal(sync.GetRevision(), revA) {
		t.Errorf("the synchronous retry answered revision %q, want %q (the worker's write of the key)", sync.GetRevision(), revA)
	}
	asyncMustAccept(t, c, countJSON.merge(t, r, "count", "m1", ""))
	countJSON.eventuallyTagged(t, c, r, "m1")
	countJSON.expect(t, c, r, "three async copies and a synchronous retry of one keyed merge", "a", "m1")

	// Later retries, async and sync: skipped; the sync one still answers
	// the original revision, not the current one.
	asyncMustAccept(t, c, countJSON.merge(t, r, "count", "a", "akey-a"))
	asyncMustAccept(t, c, countJSON.merge(t, r, "count", "m2", ""))
	countJSON.eventuallyTagged(t, c, r, "m2")
	countJSON.expect(t, c, r, "async retries after the key was applied", "a", "m1", "m2")
	if late := write(t, c, countJSON.merge(t, r, "count", "a", "akey-a"))[0]; !bytes.Equal(late.GetRevision(), revA) {
		t.Errorf("a late synchronous retry answered revision %q, want %q", late.GetRevision(), revA)
	}
	countJSON.expect(t, c, r, "a late synchronous retry", "a", "m1", "m2")

	// A keyed async put and delete are queued under their keys too.
	p := addr("once", "async", "put")
	if ids := asyncMustAccept(t, c, countJSON.put(t, p, 0, nil, "akey-put")); ids[0] != "akey-put" {
		t.Errorf("keyed put: mutation id %q, want the idempotency key", ids[0])
	}
	resp, err := c.Delete(ctx(t), &sinkv1.DeleteRequest{Completion: returnAccepted,
		Operations: []*sinkv1.DeleteOperation{{Address: p, IdempotencyKey: "akey-del"}}})
	if err != nil {
		t.Fatal(err)
	}
	if ids := acceptedIDs(t, resp.GetResults()); ids[0] != "akey-del" {
		t.Errorf("keyed delete: mutation id %q, want the idempotency key", ids[0])
	}
	eventuallyState(t, c, p, "absent", 30*time.Second)
	if letters, err := kafka.ReadDeadLetters(context.Background(), brokers, asyncDLT); err != nil || len(letters) != 0 {
		t.Errorf("dead letters: %d (%v), want none: a redelivery or retry is skipped, not dead-lettered", len(letters), err)
	}
}

// gatedCount is the count profile behind a gate: while the gate is closed
// every merge fails permanently (INVALID_ARGUMENT), so the worker
// dead-letters it; once open it counts.
type gatedCount struct{ open *atomic.Bool }

func (gatedCount) Name() string           { return "gated-count" }
func (gatedCount) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (g gatedCount) Merge(ctx context.Context, in ports.MergeInput) (domain.Document, error) {
	if !g.open.Load() {
		return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "gated-count: the gate is closed")
	}
	return countingProfile{}.Merge(ctx, in)
}

// A dead-lettered counter merge replayed twice is applied once: with
// `sink dead-letter replay` run twice (the copies reach the worker in
// different batches) and with the letter given twice to one kafka.Replay
// (the copies are published together and can share a batch). A replay has
// a new offset and the same mutation id, so the record's applied mark
// recognises it.
func TestAsyncDeadLetterReplayTwiceAppliedOnce(t *testing.T) {
	asyncSkipShort(t)
	brokers := kafkatest.InProcess(t, kafkatest.Topics(asyncTopic, asyncDLT), kafkatest.Partitions(2))
	gate := &atomic.Bool{}
	s := asyncStartAll(t, brokers, nil, bootstrap.MergeProfile(newCountingProfile),
		bootstrap.MergeProfile(func() gatedCount { return gatedCount{open: gate} }))
	c := s.Client
	ra, rb := addr("once", "replay", "cli"), addr("once", "replay", "together")
	idA := asyncMustAccept(t, c, countJSON.merge(t, ra, "gated-count", "a", ""))[0]
	idB := asyncMustAccept(t, c, countJSON.merge(t, rb, "gated-count", "b", ""))[0]

	var letters []kafka.DeadLetter
	eventually(t, 30*time.Second, "both merges to be dead-lettered", func() (bool, string) {
		var err error
		letters, err = kafka.ReadDeadLetters(context.Background(), brokers, asyncDLT)
		if err != nil {
			return false, err.Error()
		}
		return len(letters) == 2, fmt.Sprintf("%d dead letters", len(letters))
	})
	byID := map[string]kafka.DeadLetter{}
	for _, d := range letters {
		byID[d.MutationID] = d
	}
	if _, ok := byID[idA]; !ok {
		t.Fatalf("no dead letter for %s: %+v", idA, letters)
	}
	if _, ok := byID[idB]; !ok {
		t.Fatalf("no dead letter for %s: %+v", idB, letters)
	}
	countJSON.expect(t, c, ra, "a dead-lettered merge")
	gate.Store(true)

	// `sink dead-letter replay --id` twice, the second after the first was
	// applied.
	cfg, err := bootstrap.LoadConfig(asyncEnv(brokers, bootstrap.ModeServer, nil))
	if err != nil {
		t.Fatal(err)
	}
	replay := func() {
		t.Helper()
		var out bytes.Buffer
		if err := cli.DeadLetter(ctx(t), cfg, []string{"replay", "--id", idA}, &out); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "replayed 1 mutation(s)") {
			t.Fatalf("replay output:\n%s", out.String())
		}
	}
	replay()
	countJSON.eventuallyTagged(t, c, ra, "a")
	replay()
	asyncMustAccept(t, c, countJSON.merge(t, ra, "count", "after", ""))
	countJSON.eventuallyTagged(t, c, ra, "after")
	countJSON.expect(t, c, ra, "a dead letter replayed twice with the CLI", "a", "after")

	// One Replay of the same letter twice: both copies published at once.
	raw, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	pub := kafka.NewPublisher(raw)
	if err := kafka.Replay(ctx(t), pub, asyncDLT, asyncTopic, []kafka.DeadLetter{byID[idB], byID[idB]}); err != nil {
		t.Fatal(err)
	}
	asyncMustAccept(t, c, countJSON.merge(t, rb, "count", "after", ""))
	countJSON.eventuallyTagged(t, c, rb, "after")
	countJSON.expect(t, c, rb, "a dead letter replayed twice at once", "b", "after")

	// The copies were skipped as applied, not dead-lettered again.
	now, err := kafka.ReadDeadLetters(context.Background(), brokers, asyncDLT)
	if err != nil {
		t.Fatal(err)
	}
	if len(now) != 2 {
		for _, d := range now {
			t.Logf("dead letter %d/%d: mutation %s from %s/%d/%d, %s: %s", d.Partition, d.Offset, d.MutationID,
				d.SourceTopic, d.SourcePartition, d.SourceOffset, d.ErrorCode, d.ErrorMessage)
		}
		t.Errorf("%d dead letters after the replays, want still 2: the replayed copies are skipped as applied, never dead-lettered", len(now))
	}
}
