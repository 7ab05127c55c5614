package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
	"github.com/sink-io/sink/ports"
)

// startWith starts a worker on brokers with the given configurations
// (topic, dead-letter topic and logger are filled in).
func startWith(t *testing.T, brokers []string, h ports.MutationHandler, pub message.Publisher, sc SubscriberConfig, wc WorkerConfig) (*Worker, *Subscriber, *kgo.Client) {
	t.Helper()
	fence := NewFence()
	cl, err := NewClient(ClientConfig{Brokers: brokers, GroupID: "g", Topic: "muts", SessionTimeout: 6 * time.Second,
		ExtraOpts: fence.Opts(nil)})
	if err != nil {
		t.Fatal(err)
	}
	sc.Topic, sc.Logger, sc.Fence = "muts", quietLogger(), fence
	sub, err := NewSubscriber(cl, sc)
	if err != nil {
		t.Fatal(err)
	}
	if pub == nil {
		pub = NewPublisher(cl)
	}
	wc.Topic, wc.DeadLetterTopic, wc.Logger = "muts", "muts.dlq", quietLogger()
	w, err := NewWorker(sub, pub, h, wc)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
		cl.Close()
	})
	return w, sub, cl
}

// Every consumed mutation carries the log identity: the topic's id by
// default, SINK_KAFKA_LOG_EPOCH's value when set.
func TestWorkerSetsTheLogIdentity(t *testing.T) {
	for _, epoch := range []string{"", "epoch-7"} {
		t.Run("epoch="+epoch, func(t *testing.T) {
			env := newConsumerEnv(t, 2)
			env.submit(t, testMutation("a", "a"), testMutation("b", "b"), testMutation("c", "c"))
			h := &fakeHandler{}
			startWith(t, env.brokers, h, nil, SubscriberConfig{LogEpoch: epoch}, WorkerConfig{})
			waitFor(t, 20*time.Second, "three mutations", func() bool { return len(h.appliedIDs()) == 3 })
			want := epoch
			if want == "" {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				id, err := topicID(ctx, newTestClient(t, env.brokers, ClientConfig{}), "muts")
				if err != nil || id == "" {
					t.Fatalf("the broker reports no topic id: %q, %v", id, err)
				}
				want = id
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, m := range h.applied {
				if m.Source.Log != want || m.Source.Offset < 0 {
					t.Errorf("mutation %s: source %+v, want log %q", m.ID, m.Source, want)
				}
			}
		})
	}
}

// parkHandler emulates the application for parking: a mutation of a
// record whose earlier mutation in the batch failed fails too ("blocked"),
// and "stuck" fails transiently until stuckOK.
type parkHandler struct {
	mu       sync.Mutex
	applied  []string
	maxBatch int
	stuckOK  atomic.Bool
	budget   atomic.Int64 // time left before the last call's deadline
}

func (h *parkHandler) ApplyMutations(ctx context.Context, muts []domain.Mutation) []ports.ApplyOutcome {
	if d, ok := ctx.Deadline(); ok {
		h.budget.Store(int64(time.Until(d)))
	}
	out := make([]ports.ApplyOutcome, len(muts))
	failed := map[string]bool{}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.maxBatch = max(h.maxBatch, len(muts))
	for i, m := range muts {
		k := m.Address.String()
		if failed[k] || (m.ID == "stuck" && !h.stuckOK.Load()) {
			failed[k] = true
			out[i] = ports.ApplyOutcome{Err: &domain.Error{Code: domain.CodeUnavailable, Retryable: true, Message: "not applied within the worker's time budget"}, Attempts: 1}
			continue
		}
		out[i] = ports.ApplyOutcome{Attempts: 1}
		h.applied = append(h.applied, m.ID)
	}
	return out
}

func (h *parkHandler) ids() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.applied)
}

// A mutation that still fails transiently when the batch's time budget
// ends is parked with its record's later mutations: the partition's other
// records keep flowing (no rewind, nothing read twice), the commit stops
// before the parked offset (a new owner reads it again), and the record's
// mutations apply in order once it succeeds.
func TestWorkerParksOnlyTheFailingRecord(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t, testMutation("a1", "a"), testMutation("stuck", "s"), testMutation("b1", "b"), testMutation("s2", "s"))
	h := &parkHandler{}
	w, sub, cl := startWith(t, env.brokers, h, nil, SubscriberConfig{RedeliveryDelay: 20 * time.Millisecond},
		WorkerConfig{BatchTimeout: 4 * time.Second, MaxAttempts: 1000})
	waitFor(t, 20*time.Second, "a1 and b1", func() bool { return len(h.ids()) >= 2 })
	// The partition flows past the parked record.
	env.submit(t, testMutation("c1", "c"), testMutation("s3", "s"))
	waitFor(t, 20*time.Second, "c1 while s is parked", func() bool { return slices.Contains(h.ids(), "c1") })
	waitFor(t, 20*time.Second, "s parked again", func() bool { return sub.Stats().Parked >= 6 })
	if ids := h.ids(); fmt.Sprint(ids) != "[a1 b1 c1]" {
		t.Fatalf("applied %v, want [a1 b1 c1]: each once, nothing of s", ids)
	}
	if b := time.Duration(h.budget.Load()); b <= 0 || b > 4*time.Second {
		t.Fatalf("the handler's context had %s left, want a deadline within BatchTimeout", b)
	}
	if st := w.Stats(); st.DeadLettered != 0 || sub.Stats().ParkedNow != 3 {
		t.Fatalf("worker %+v, subscriber %+v: want s's three mutations parked, nothing dead-lettered", st, sub.Stats())
	}
	// Stop while s is parked: the committed offset is stuck's.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	h2 := &parkHandler{}
	h2.stuckOK.Store(true)
	startWith(t, env.brokers, h2, nil, SubscriberConfig{}, WorkerConfig{})
	waitFor(t, 20*time.Second, "the parked mutations", func() bool { return slices.Contains(h2.ids(), "s3") })
	ids := h2.ids()
	if ids[0] != "stuck" || slices.Contains(ids, "a1") {
		t.Fatalf("the next owner applied %v: want it to start at stuck (a1 committed)", ids)
	}
	if i, j, k := slices.Index(ids, "stuck"), slices.Index(ids, "s2"), slices.Index(ids, "s3"); !(i < j && j < k) {
		t.Fatalf("s's mutations applied out of order: %v", ids)
	}
}

// When the parked record recovers, its queue is applied in order and the
// partition is committed past it.
func TestWorkerAppliesAParkedRecordWhenItRecovers(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t, testMutation("stuck", "s"), testMutation("b1", "b"), testMutation("s2", "s"))
	h := &parkHandler{}
	w, sub, _ := startWith(t, env.brokers, h, nil, SubscriberConfig{RedeliveryDelay: 20 * time.Millisecond}, WorkerConfig{MaxAttempts: 1000})
	waitFor(t, 20*time.Second, "b1", func() bool { return slices.Contains(h.ids(), "b1") })
	h.stuckOK.Store(true)
	waitFor(t, 20*time.Second, "s2", func() bool { return slices.Contains(h.ids(), "s2") })
	if ids := h.ids(); fmt.Sprint(ids) != "[b1 stuck s2]" {
		t.Fatalf("applied %v", ids)
	}
	waitFor(t, 10*time.Second, "nothing parked", func() bool { return sub.Stats().ParkedNow == 0 })
	if st := w.Stats(); st.Parked < 2 || st.DeadLettered != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Everything is committed: a new member gets only new records.
	env.submit(t, testMutation("new", "n"))
	waitFor(t, 20*time.Second, "new", func() bool { return slices.Contains(h.ids(), "new") })
}

// Backpressure: with MaxParked records parked, no new records are polled
// until the parked ones are resolved.
func TestWorkerStopsPollingWhenTooManyAreParked(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t, testMutation("stuck", "s"), testMutation("s2", "s"))
	h := &parkHandler{}
	_, sub, _ := startWith(t, env.brokers, h, nil, SubscriberConfig{RedeliveryDelay: 20 * time.Millisecond, MaxParked: 2}, WorkerConfig{MaxAttempts: 1000})
	waitFor(t, 20*time.Second, "two parked", func() bool { return sub.Stats().ParkedNow == 2 })
	env.submit(t, testMutation("other", "o"))
	waitFor(t, 20*time.Second, "several redeliveries of the parked", func() bool { return sub.Stats().Parked >= 10 })
	if slices.Contains(h.ids(), "other") {
		t.Fatal("a new record was polled while MaxParked records were parked")
	}
	h.stuckOK.Store(true)
	waitFor(t, 20*time.Second, "other after the parked resolved", func() bool { return slices.Contains(h.ids(), "other") })
	if ids := h.ids(); fmt.Sprint(ids) != "[stuck s2 other]" {
		t.Fatalf("applied %v", ids)
	}
}

// A parked mutation gets MaxAttempts attempts over its deliveries, then it
// is dead-lettered and its partition moves on.
func TestWorkerDeadLettersAParkedMutationWhoseAttemptsRunOut(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t, testMutation("stuck", "s"), testMutation("after", "a"))
	var deliveries atomic.Int32
	h := &fakeHandler{outcome: func(_ context.Context, m domain.Mutation) ports.ApplyOutcome {
		if m.ID == "stuck" {
			deliveries.Add(1)
			return ports.ApplyOutcome{Err: &domain.Error{Code: domain.CodeUnavailable, Retryable: true, Message: "still down"}, Attempts: 2}
		}
		return ports.ApplyOutcome{Attempts: 1}
	}}
	w, _, _ := startWith(t, env.brokers, h, nil, SubscriberConfig{RedeliveryDelay: 10 * time.Millisecond}, WorkerConfig{MaxAttempts: 5})
	waitFor(t, 20*time.Second, "a dead letter", func() bool { return w.Stats().DeadLettered == 1 })
	waitFor(t, 20*time.Second, "after applied", func() bool { return slices.Contains(h.appliedIDs(), "after") })
	if n := deliveries.Load(); n != 3 {
		t.Fatalf("stuck delivered %d times, want 3 (2+2+2 attempts >= 5)", n)
	}
	letters, err := ReadDeadLetters(context.Background(), env.brokers, "muts.dlq")
	if err != nil || len(letters) != 1 {
		t.Fatalf("dead letters %d, %v", len(letters), err)
	}
	if d := letters[0]; d.MutationID != "stuck" || d.Attempts != 6 || d.ErrorCode != "UNAVAILABLE" || !strings.Contains(d.ErrorMessage, "retries exhausted after 6 attempts") {
		t.Fatalf("dead letter %+v", d)
	}
}

// failingPublisher refuses every message.
type failingPublisher struct{ calls atomic.Int32 }

func (p *failingPublisher) Publish(string, ...*message.Message) error {
	p.calls.Add(1)
	return errors.New("the dead-letter topic is unavailable")
}
func (p *failingPublisher) Close() error { return nil }

// Writing dead letters is bounded in time: when the topic refuses them,
// the batch ends after DeadLetterTimeout and the mutation is read again.
func TestWorkerBoundsTheDeadLetterProduce(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t, testMutation("bad", "b"))
	var deliveries atomic.Int32
	h := &fakeHandler{outcome: func(_ context.Context, m domain.Mutation) ports.ApplyOutcome {
		deliveries.Add(1)
		return ports.ApplyOutcome{Err: domain.Errorf(domain.CodeInvalidArgument, "bad input"), Attempts: 1}
	}}
	pub := &failingPublisher{}
	start := time.Now()
	w, _, _ := startWith(t, env.brokers, h, pub, SubscriberConfig{RedeliveryDelay: 10 * time.Millisecond}, WorkerConfig{DeadLetterTimeout: 300 * time.Millisecond})
	waitFor(t, 20*time.Second, "a redelivery", func() bool { return deliveries.Load() >= 3 })
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("three deliveries took %s", el)
	}
	if !w.Running() || w.Stats().DeadLettered != 0 || pub.calls.Load() < 3 {
		t.Fatalf("running %v, stats %+v, publish calls %d", w.Running(), w.Stats(), pub.calls.Load())
	}
}

// A failed offset commit is retried, counted and reported by Health; when
// the brokers accept commits again it is committed without new records and
// Health recovers.
func TestFailedCommitIsRetriedAndSurfaced(t *testing.T) {
	c := kafkatest.InProcessCluster(t, kafkatest.Topics("muts", "muts.dlq"))
	brokers := c.ListenAddrs()
	var refuse atomic.Bool
	refuse.Store(true)
	var refused atomic.Int32
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !refuse.Load() {
			return nil, nil, false
		}
		refused.Add(1)
		r := req.(*kmsg.OffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.GroupAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	q, err := NewQueue(NewPublisher(newTestClient(t, brokers, ClientConfig{})), QueueConfig{Topic: "muts"})
	if err != nil {
		t.Fatal(err)
	}
	env := consumerEnv{brokers: brokers, queue: q}
	env.submit(t, testMutation("m1", "a"))
	h := &fakeHandler{}
	w, sub, _ := startWith(t, brokers, h, nil, SubscriberConfig{CommitTimeout: 400 * time.Millisecond}, WorkerConfig{})
	waitFor(t, 20*time.Second, "a failed commit", func() bool { return w.Stats().CommitFailures >= 1 })
	if refused.Load() < 2 || sub.Stats().CommitRetries < 1 {
		t.Fatalf("commit attempts %d, retries %d: the failed commit was not retried", refused.Load(), sub.Stats().CommitRetries)
	}
	if err := w.Health(); err == nil || !strings.Contains(err.Error(), "cannot commit") {
		t.Fatalf("health %v, want the commit error", err)
	}
	refuse.Store(false)
	waitFor(t, 20*time.Second, "the commit retried without new records", func() bool { return w.Stats().Commits >= 1 })
	if err := w.Health(); err != nil {
		t.Fatalf("health after the commit: %v", err)
	}
	if ids := h.appliedIDs(); len(ids) != 1 {
		t.Fatalf("applied %v", ids)
	}
}

// A partition that goes (revoked or lost) cancels the poll in flight and
// its finished prefix is not committed.
func TestFenceCancelsThePollOfAGonePartition(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t, testMutation("x", "x"))
	started := make(chan struct{})
	var once sync.Once
	var canceled atomic.Bool
	h := &fakeHandler{outcome: func(ctx context.Context, m domain.Mutation) ports.ApplyOutcome {
		once.Do(func() { close(started) })
		select {
		case <-ctx.Done():
			canceled.Store(true)
			return ports.ApplyOutcome{Err: domain.Wrap(domain.CodeCanceled, ctx.Err(), "stopped"), Attempts: 1}
		case <-time.After(15 * time.Second):
			return ports.ApplyOutcome{Attempts: 1}
		}
	}}
	_, sub, _ := startWith(t, env.brokers, h, nil, SubscriberConfig{}, WorkerConfig{})
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("nothing applied")
	}
	sub.cfg.Fence.Gone(map[string][]int32{"muts": {0}})
	waitFor(t, 10*time.Second, "the fenced poll to end", func() bool { return sub.Stats().Fenced == 1 })
	if !canceled.Load() {
		t.Fatal("the handler's context was not canceled")
	}
	if st := sub.Stats(); st.Commits != 0 {
		t.Fatalf("committed a gone partition: %+v", st)
	}
}

// Parked records delivered again share a batch with new records, and a
// batch never holds more than MaxPollRecords records (a larger one would
// not be put back in order by the worker); a record's queue is delivered
// in order, in parts when it is larger.
func TestParkedRecordsKeepBatchesWithinMaxPollRecords(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t, testMutation("stuck", "s"), testMutation("s2", "s"), testMutation("s3", "s"), testMutation("s4", "s"),
		testMutation("s5", "s"), testMutation("o1", "o"), testMutation("o2", "p"))
	h := &parkHandler{}
	_, sub, _ := startWith(t, env.brokers, h, nil, SubscriberConfig{MaxPollRecords: 3, RedeliveryDelay: 20 * time.Millisecond},
		WorkerConfig{MaxBatch: 3, MaxAttempts: 1000})
	waitFor(t, 20*time.Second, "o1 and o2", func() bool { return len(h.ids()) == 2 })
	waitFor(t, 20*time.Second, "s parked and delivered again", func() bool { return sub.Stats().Parked >= 10 })
	env.submit(t, testMutation("o3", "q"), testMutation("s6", "s"))
	waitFor(t, 20*time.Second, "o3", func() bool { return slices.Contains(h.ids(), "o3") })
	h.stuckOK.Store(true)
	waitFor(t, 20*time.Second, "s6", func() bool { return slices.Contains(h.ids(), "s6") })
	var s []string
	for _, id := range h.ids() {
		if id == "stuck" || strings.HasPrefix(id, "s") && len(id) == 2 {
			s = append(s, id)
		}
	}
	if fmt.Sprint(s) != "[stuck s2 s3 s4 s5 s6]" {
		t.Fatalf("record s applied as %v (all: %v)", s, h.ids())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.maxBatch > 3 {
		t.Fatalf("a batch of %d mutations, MaxPollRecords is 3", h.maxBatch)
	}
}

// The Subscriber never emits a batch larger than MaxPollRecords, parked
// records delivered again included, and delivers a parked record's queue
// in offset order.
func TestSubscriberKeepsParkedBatchesWithinMaxPollRecords(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t, testMutation("s1", "s"), testMutation("s2", "s"), testMutation("s3", "s"), testMutation("s4", "s"),
		testMutation("s5", "s"), testMutation("o1", "o"), testMutation("o2", "p"))
	cl, err := NewClient(ClientConfig{Brokers: env.brokers, GroupID: "g", Topic: "muts", SessionTimeout: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sub, err := NewSubscriber(cl, SubscriberConfig{Topic: "muts", MaxPollRecords: 3, RedeliveryDelay: 10 * time.Millisecond,
		CloseTimeout: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ch, err := sub.Subscribe(ctx, "muts")
	if err != nil {
		t.Fatal(err)
	}
	deliveries := map[string]int{}
	var acked []string
	for len(acked) < 9 {
		var msg *message.Message
		select {
		case msg = <-ch:
		case <-ctx.Done():
			t.Fatalf("acked only %v", acked)
		}
		if size, _ := strconv.Atoi(msg.Metadata.Get(MetadataBatchSize)); size > 3 {
			t.Fatalf("a batch of %d records, MaxPollRecords is 3", size)
		}
		id := msg.UUID
		deliveries[id]++
		if id == "s1" && deliveries[id] == 3 {
			env.submit(t, testMutation("o3", "q"), testMutation("s6", "s"))
		}
		if strings.HasPrefix(id, "s") && deliveries["s1"] < 5 {
			if !markParked(msg) {
				t.Fatal("the subscriber does not park")
			}
			msg.Nack()
			continue
		}
		acked = append(acked, id)
		msg.Ack()
	}
	var s []string
	for _, id := range acked {
		if strings.HasPrefix(id, "s") {
			s = append(s, id)
		}
	}
	if fmt.Sprint(s) != "[s1 s2 s3 s4 s5 s6]" || deliveries["o1"] != 1 || deliveries["o3"] != 1 {
		t.Fatalf("acked %v, deliveries %v", acked, deliveries)
	}
}
