package integration_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/countprofile"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
	"github.com/sink-io/sink/ports"
)

// hangingStorage is one worker's view of the shared storage whose writes
// hang until release is closed — ignoring the calls' context, like a hung
// storage connection. Reads pass.
type hangingStorage struct {
	ports.Storage
	once     sync.Once
	stalled  chan struct{} // closed when the first write started
	release  chan struct{} // closed by the test
	inflight sync.WaitGroup
	mu       sync.Mutex
	ops      []string // the hung writes' operations (address key and mutation ids)
}

func (s *hangingStorage) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	s.inflight.Add(1)
	defer s.inflight.Done()
	s.mu.Lock()
	for _, op := range ops {
		desc := op.Address.Key.StringValue()
		if op.Mark != nil {
			desc += fmt.Sprint(op.Mark.IDs)
		}
		s.ops = append(s.ops, desc)
	}
	s.mu.Unlock()
	s.once.Do(func() { close(s.stalled) })
	<-s.release
	return s.Storage.Write(context.Background(), ops)
}

// The reproduction of issue 15: a worker whose batch outlives the group's
// rebalance timeout (its storage call hangs) is expelled; a second worker
// takes the partition and applies the same and later mutations, among them
// a put of a newer value; then the expelled worker's stalled write goes
// through. The records' applied marks (and the fence) make it change
// nothing: the newer value is not overwritten and the counter merges
// (non-idempotent) are each applied exactly once.
func TestAsyncExpelledWorkerCannotOverwriteOrApplyTwice(t *testing.T) {
	asyncSkipShort(t)
	brokers := kafkatest.InProcess(t, kafkatest.Topics(asyncTopic, asyncDLT), kafkatest.Partitions(1))
	shared := memory.New()
	hung := &hangingStorage{Storage: shared, stalled: make(chan struct{}), release: make(chan struct{})}
	released := false
	defer func() {
		if !released {
			close(hung.release)
		}
	}()
	env := asyncEnv(brokers, bootstrap.ModeWorker, map[string]string{
		"SINK_KAFKA_REBALANCE_TIMEOUT": "6s",
		"SINK_KAFKA_SESSION_TIMEOUT":   "6s",
		"SINK_APPLY_MAX_BACKOFF":       "200ms",
		"SINK_SHUTDOWN_TIMEOUT":        "5s",
	})
	opts := func(w **kafka.Worker, st ports.Storage) []fx.Option {
		return []fx.Option{
			bootstrap.MergeProfile(countprofile.New),
			fx.Decorate(func(ports.Storage) ports.Storage { return st }),
			fx.Populate(w),
		}
	}

	doc := domain.Address{Store: "primary", Namespace: "shop", Dataset: "orders", Key: domain.StringKey("doc")}
	cnt := domain.Address{Store: "primary", Namespace: "shop", Dataset: "orders", Key: domain.StringKey("cnt")}
	put := func(id, value string) domain.Mutation {
		return domain.Mutation{ID: id, Kind: domain.MutationPut, Address: doc, Mode: domain.PutUpsert, SubmittedAt: time.Now(),
			Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"value":"` + value + `"}`)}}
	}
	count := func(id string) domain.Mutation {
		intent, err := countprofile.Encode(domain.ContentTypeJSON, countprofile.Intent{Add: 1, ID: id})
		if err != nil {
			t.Fatal(err)
		}
		return domain.Mutation{ID: id, Kind: domain.MutationMerge, Address: cnt, SubmittedAt: time.Now(),
			Merge: domain.MergeIntent{Profile: countprofile.Name, Intent: intent}}
	}
	raw, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	q, err := kafka.NewQueue(kafka.NewPublisher(raw), kafka.QueueConfig{Topic: asyncTopic})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(muts ...domain.Mutation) {
		t.Helper()
		for i, err := range q.Submit(context.Background(), muts) {
			if err != nil {
				t.Fatalf("submit %s: %v", muts[i].ID, err)
			}
		}
	}

	// Worker A takes the first batch and hangs in storage.
	submit(put("put-v1", "v1"), count("c1"), count("c2"))
	var workerA, workerB *kafka.Worker
	a := asyncStartWorker(t, env, opts(&workerA, hung)...)
	select {
	case <-hung.stalled:
	case <-time.After(20 * time.Second):
		t.Fatal("worker A never reached storage")
	}
	stalledAt := time.Now()
	// Later mutations, among them the newer value.
	submit(put("put-v2", "v2"), count("c3"))

	// Worker B joins: A cannot rejoin while its batch hangs, the group
	// expels it after the rebalance timeout and B applies everything.
	asyncStartWorker(t, env, opts(&workerB, shared)...)
	readDoc := func(addr domain.Address) (domain.Record, bool) {
		r := shared.Read(context.Background(), []domain.Address{addr})[0]
		if r.Err != nil {
			t.Fatalf("read %s: %v", addr.Key.StringValue(), r.Err)
		}
		return r.Record, r.Found
	}
	counter := func() countprofile.Counter {
		var c countprofile.Counter
		if rec, ok := readDoc(cnt); ok {
			if err := countprofile.Decode(rec.Document, &c); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	value := func() string {
		rec, ok := readDoc(doc)
		if !ok {
			return "<absent>"
		}
		return string(rec.Document.Data)
	}
	eventually(t, 25*time.Second, "worker B to apply everything", func() (bool, string) {
		c := counter()
		return value() == `{"value":"v2"}` && c.N == 3, fmt.Sprintf("doc %s, counter %+v", value(), c)
	})
	if time.Since(stalledAt) < 6*time.Second {
		t.Fatalf("worker B applied the partition %s after A stalled, before the rebalance timeout", time.Since(stalledAt))
	}

	// Release A: its stale writes reach storage now, then its batch ends.
	before := workerA.Stats()
	close(hung.release)
	released = true
	eventually(t, 20*time.Second, "worker A to finish its batch", func() (bool, string) {
		st := workerA.Stats()
		return st.Commits+st.CommitFailures > before.Commits+before.CommitFailures, fmt.Sprintf("%+v", st)
	})
	hung.inflight.Wait()
	hung.mu.Lock()
	t.Logf("worker A's hung writes: %v", hung.ops)
	if !slices.ContainsFunc(hung.ops, func(s string) bool { return strings.HasPrefix(s, "doc") }) {
		t.Errorf("worker A's hung writes %v include no put of doc: the scenario did not happen", hung.ops)
	}
	hung.mu.Unlock()
	if st := workerA.Stats(); st.CommitFailures == 0 {
		t.Errorf("worker A committed its batch: it was not expelled (%+v)", st)
	}

	if got := value(); got != `{"value":"v2"}` {
		t.Errorf("the expelled worker overwrote the newer value: doc is %s", got)
	}
	c := counter()
	ids := slices.Clone(c.IDs)
	slices.Sort(ids)
	if c.N != 3 || !slices.Equal(ids, []string{"c1", "c2", "c3"}) {
		t.Errorf("counter %+v: want each of c1, c2, c3 applied exactly once", c)
	}
	// The failed commit is visible to operators.
	if m := opsScrape(t, a.http.Addr().String()); m.value("sink_worker_offset_commit_failures_total", nil) < 1 {
		t.Errorf("sink_worker_offset_commit_failures_total of worker A is %v, want at least 1", m.value("sink_worker_offset_commit_failures_total", nil))
	}
	if st := workerA.Stats(); st.DeadLettered != 0 {
		t.Errorf("worker A dead-lettered mutations another worker applied: %+v", st)
	}
	t.Logf("worker A %+v; worker B %+v", workerA.Stats(), workerB.Stats())
	a.stop(t)
}
