package kafka

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
	"github.com/sink-io/sink/ports"
)

// fakeHandler records the batches it gets and answers with outcome.
type fakeHandler struct {
	mu      sync.Mutex
	batches [][]domain.Mutation
	applied []domain.Mutation
	outcome func(ctx context.Context, m domain.Mutation) ports.ApplyOutcome
}

func (h *fakeHandler) ApplyMutations(ctx context.Context, muts []domain.Mutation) []ports.ApplyOutcome {
	h.mu.Lock()
	h.batches = append(h.batches, append([]domain.Mutation(nil), muts...))
	h.mu.Unlock()
	out := make([]ports.ApplyOutcome, len(muts))
	for i, m := range muts {
		out[i] = ports.ApplyOutcome{Attempts: 1}
		if h.outcome != nil {
			out[i] = h.outcome(ctx, m)
		}
		if out[i].Err == nil {
			h.mu.Lock()
			h.applied = append(h.applied, m)
			h.mu.Unlock()
		}
	}
	return out
}

func (h *fakeHandler) appliedIDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]string, len(h.applied))
	for i, m := range h.applied {
		ids[i] = m.ID
	}
	return ids
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func quietLogger() *slog.Logger {
	if os.Getenv("KDEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type consumerEnv struct {
	brokers []string
	queue   *Queue
}

func newConsumerEnv(t *testing.T, partitions int) consumerEnv {
	brokers := kafkatest.InProcess(t, kafkatest.Topics("muts", "muts.dlq"), kafkatest.Partitions(partitions))
	q, err := NewQueue(NewPublisher(newTestClient(t, brokers, ClientConfig{})), QueueConfig{Topic: "muts"})
	if err != nil {
		t.Fatal(err)
	}
	return consumerEnv{brokers: brokers, queue: q}
}

func (e consumerEnv) submit(t *testing.T, muts ...domain.Mutation) {
	t.Helper()
	for i, err := range e.queue.Submit(context.Background(), muts) {
		if err != nil {
			t.Fatalf("submit %s: %v", muts[i].ID, err)
		}
	}
}

func (e consumerEnv) start(t *testing.T, h ports.MutationHandler, maxPoll int) (*Worker, *kgo.Client) {
	t.Helper()
	cl, err := NewClient(ClientConfig{Brokers: e.brokers, GroupID: "g", Topic: "muts", SessionTimeout: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := NewSubscriber(cl, SubscriberConfig{Topic: "muts", MaxPollRecords: maxPoll, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewWorker(sub, NewPublisher(cl), h, WorkerConfig{Topic: "muts", DeadLetterTopic: "muts.dlq", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop(context.Background())
			cl.Close()
		}
	})
	return c, cl
}

func stop(t *testing.T, c *Worker, cl *kgo.Client, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
}

func TestWorkerAppliesInOrderDeadLettersAndCommits(t *testing.T) {
	env := newConsumerEnv(t, 3)
	var muts []domain.Mutation
	for i := range 40 {
		muts = append(muts, testMutation(fmt.Sprintf("m%02d", i), fmt.Sprintf("k%d", i%5)))
	}
	env.submit(t, muts...)
	// An undecodable record and a mutation that fails permanently.
	raw := newTestClient(t, env.brokers, ClientConfig{})
	if err := raw.ProduceSync(context.Background(), &kgo.Record{Topic: "muts", Key: []byte("k0"), Value: []byte("\x01garbage")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	env.submit(t, testMutation("fail-me", "k1"), testMutation("after", "k1"))

	h := &fakeHandler{outcome: func(_ context.Context, m domain.Mutation) ports.ApplyOutcome {
		if m.ID == "fail-me" {
			return ports.ApplyOutcome{Err: domain.Errorf(domain.CodeNotFound, "record %s does not exist", m.Address), Attempts: 3}
		}
		return ports.ApplyOutcome{Attempts: 1}
	}}
	c, cl := env.start(t, h, 16)
	waitFor(t, 20*time.Second, "every record processed", func() bool {
		st := c.Stats()
		return st.Records >= 43 && st.DeadLettered >= 2 && st.Commits == st.Batches
	})
	st := c.Stats()
	if st.DeadLettered != 2 || st.Applied != 41 {
		t.Fatalf("stats %+v", st)
	}
	h.mu.Lock()
	for _, b := range h.batches {
		if len(b) > 16 {
			t.Errorf("batch of %d mutations, MaxPollRecords is 16", len(b))
		}
	}
	last := map[string]string{}
	for _, m := range h.applied {
		k := m.Address.Key.StringValue()
		if m.ID != "after" && last[k] > m.ID {
			t.Errorf("record %s: %s applied after %s", k, m.ID, last[k])
		}
		last[k] = m.ID
		if m.Source.Offset < 0 {
			t.Errorf("mutation %s has no source position", m.ID)
		}
	}
	h.mu.Unlock()
	if got := last["k1"]; got != "after" {
		t.Errorf("last mutation of k1 is %s, want after (the partition keeps flowing past the dead letter)", got)
	}

	letters, err := ReadDeadLetters(context.Background(), env.brokers, "muts.dlq")
	if err != nil {
		t.Fatal(err)
	}
	if len(letters) != 2 {
		t.Fatalf("%d dead letters, want 2", len(letters))
	}
	byReason := map[string]DeadLetter{}
	for _, d := range letters {
		byReason[d.Reason] = d
	}
	u := byReason[ReasonUndecodable]
	if u.Mutation != nil || u.DecodeError == "" || u.ErrorCode != "INVALID_ARGUMENT" || string(u.Value) != "\x01garbage" ||
		string(u.Key) != "k0" || u.SourceTopic != "muts" || u.DeadLetteredAt.IsZero() {
		t.Errorf("undecodable dead letter: %+v", u)
	}
	f := byReason[ReasonApplyFailed]
	if f.Mutation == nil || f.MutationID != "fail-me" || f.ErrorCode != "NOT_FOUND" || f.Attempts != 3 ||
		f.ErrorMessage == "" || f.SourceTopic != "muts" || f.SourceOffset < 0 {
		t.Errorf("failed dead letter: %+v", f)
	}
	srcOK := false
	for _, r := range readAll(t, env.brokers, "muts", 43) {
		if r.Partition == f.SourcePartition && r.Offset == f.SourceOffset {
			srcOK = Unmarshal(r).UUID == "fail-me"
		}
	}
	if !srcOK {
		t.Errorf("dead letter source %d/%d is not the failed record", f.SourcePartition, f.SourceOffset)
	}

	// Everything was committed: a new member of the group gets only new records.
	stop(t, c, cl, 10*time.Second)
	h2 := &fakeHandler{}
	c2, _ := env.start(t, h2, 16)
	env.submit(t, testMutation("new", "k3"))
	waitFor(t, 20*time.Second, "the new mutation", func() bool { return len(h2.appliedIDs()) >= 1 })
	time.Sleep(200 * time.Millisecond) // give stray redeliveries a chance to show up
	if ids := h2.appliedIDs(); len(ids) != 1 || ids[0] != "new" {
		t.Fatalf("second member applied %v, want only [new]", ids)
	}
	_ = c2
}

func TestWorkerLeavesCanceledMutationsUncommitted(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t, testMutation("a1", "a"), testMutation("a2", "a"), testMutation("slow", "s"), testMutation("a3", "a"))
	started := make(chan struct{})
	var once sync.Once
	h := &fakeHandler{outcome: func(ctx context.Context, m domain.Mutation) ports.ApplyOutcome {
		if m.ID == "slow" {
			once.Do(func() { close(started) })
			<-ctx.Done()
			return ports.ApplyOutcome{Err: domain.Wrap(domain.CodeCanceled, ctx.Err(), "stopped"), Attempts: 1}
		}
		return ports.ApplyOutcome{Attempts: 1}
	}}
	c, cl := env.start(t, h, 100)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the slow mutation never started")
	}
	// Stop with a short budget: the handler is canceled, the batch ends.
	stop(t, c, cl, 300*time.Millisecond)
	if st := c.Stats(); st.DeadLettered != 0 {
		t.Fatalf("canceled mutations were dead-lettered: %+v", st)
	}

	h2 := &fakeHandler{}
	env.start(t, h2, 100)
	waitFor(t, 20*time.Second, "redelivery", func() bool { return len(h2.appliedIDs()) >= 2 })
	ids := h2.appliedIDs()
	if len(ids) != 2 || ids[0] != "slow" || ids[1] != "a3" {
		t.Fatalf("redelivered %v, want [slow a3] (a1 and a2 were committed)", ids)
	}
	h2.mu.Lock()
	first := h2.batches[0][0]
	h2.mu.Unlock()
	if first.Source.Offset != 2 {
		t.Fatalf("redelivery starts at offset %d, want 2", first.Source.Offset)
	}
}

func TestWorkerRetriesSpuriousCancel(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t, testMutation("x1", "x"), testMutation("x2", "x"))
	var mu sync.Mutex
	calls := map[string]int{}
	h := &fakeHandler{outcome: func(_ context.Context, m domain.Mutation) ports.ApplyOutcome {
		mu.Lock()
		defer mu.Unlock()
		calls[m.ID]++
		if m.ID == "x1" && calls[m.ID] == 1 {
			// Canceled although the consumer is not stopping.
			return ports.ApplyOutcome{Err: domain.Errorf(domain.CodeCanceled, "spurious"), Attempts: 1}
		}
		return ports.ApplyOutcome{Attempts: 1}
	}}
	c, _ := env.start(t, h, 100)
	waitFor(t, 20*time.Second, "x1 applied after the rewind", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls["x1"] >= 2 && calls["x2"] >= 2
	})
	if !c.Running() {
		t.Fatal("the consumer stopped")
	}
	ids := h.appliedIDs()
	// x2 of the first batch was applied, then both again from x1 on.
	want := []string{"x2", "x1", "x2"}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("applied %v, want %v", ids, want)
	}
}

func TestDeadLetterReplay(t *testing.T) {
	env := newConsumerEnv(t, 2)
	var broken sync.Map
	broken.Store("r1", true)
	broken.Store("r2", true)
	h := &fakeHandler{outcome: func(_ context.Context, m domain.Mutation) ports.ApplyOutcome {
		if _, ok := broken.Load(m.ID); ok {
			return ports.ApplyOutcome{Err: domain.Errorf(domain.CodeInvalidArgument, "unknown profile"), Attempts: 1}
		}
		return ports.ApplyOutcome{Attempts: 1}
	}}
	c, _ := env.start(t, h, 100)
	env.submit(t, testMutation("r1", "a"), testMutation("ok", "b"), testMutation("r2", "c"))
	waitFor(t, 20*time.Second, "two dead letters", func() bool { return c.Stats().DeadLettered == 2 })
	letters, err := ReadDeadLetters(context.Background(), env.brokers, "muts.dlq")
	if err != nil || len(letters) != 2 {
		t.Fatalf("dead letters %d, %v", len(letters), err)
	}
	// Fix the cause for r1 only and replay it.
	broken.Delete("r1")
	var pick []DeadLetter
	for _, d := range letters {
		if d.MutationID == "r1" {
			pick = append(pick, d)
		}
	}
	pub := NewPublisher(newTestClient(t, env.brokers, ClientConfig{}))
	if err := Replay(context.Background(), pub, "muts.dlq", "muts", pick); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the replayed mutation", func() bool {
		for _, id := range h.appliedIDs() {
			if id == "r1" {
				return true
			}
		}
		return false
	})
	recs := readAll(t, env.brokers, "muts", 4)
	var replayed *kgo.Record
	for _, r := range recs {
		if Unmarshal(r).UUID == "r1" && r.Offset > 0 {
			replayed = r
		}
	}
	if replayed == nil {
		t.Fatal("no replayed record")
	}
	md := Unmarshal(replayed).Metadata
	if want := "muts.dlq/" + strconv.Itoa(int(pick[0].Partition)) + "/" + strconv.FormatInt(pick[0].Offset, 10); md[HeaderReplayedFrom] != want {
		t.Errorf("replayed-from %q, want %q", md[HeaderReplayedFrom], want)
	}
	for k := range md {
		if len(k) > 9 && k[:9] == "sink-dlq-" {
			t.Errorf("replayed record carries dead-letter header %s", k)
		}
	}
}

func TestReadDeadLettersOfMissingTopic(t *testing.T) {
	brokers := kafkatest.InProcess(t)
	letters, err := ReadDeadLetters(context.Background(), brokers, "nothing-here")
	if err != nil || len(letters) != 0 {
		t.Fatalf("got %d, %v", len(letters), err)
	}
}

// A panic while applying a batch nacks its messages (they are read again
// and applied) instead of ending the worker.
func TestWorkerRecoversFromPanickingHandler(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t, testMutation("p1", "p"), testMutation("p2", "p"))
	var once sync.Once
	h := &fakeHandler{outcome: func(_ context.Context, m domain.Mutation) ports.ApplyOutcome {
		once.Do(func() { panic("boom") })
		return ports.ApplyOutcome{Attempts: 1}
	}}
	c, _ := env.start(t, h, 100)
	waitFor(t, 20*time.Second, "p1 and p2 applied after the panic", func() bool { return len(h.appliedIDs()) >= 2 })
	if !c.Running() {
		t.Fatal("the worker stopped after a panic")
	}
	if ids := h.appliedIDs(); fmt.Sprint(ids) != "[p1 p2]" {
		t.Fatalf("applied %v, want [p1 p2]", ids)
	}
}
