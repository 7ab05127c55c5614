package kafka

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// chanSubscriber is a message.Subscriber that emits what the test sends.
type chanSubscriber struct {
	ch   chan *message.Message
	once sync.Once
}

func (s *chanSubscriber) Subscribe(context.Context, string) (<-chan *message.Message, error) {
	return s.ch, nil
}

func (s *chanSubscriber) Close() error {
	s.once.Do(func() { close(s.ch) })
	return nil
}

// pollMessage is mutation m as the Kafka subscriber emits it: record
// offset, position index in poll of size, and the poll it follows.
func pollMessage(t *testing.T, m domain.Mutation, offset int64, poll, after string, index, size int) *message.Message {
	t.Helper()
	mm, err := NewMutationMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	msg := Unmarshal(Marshal("muts", mm))
	md := msg.Metadata
	md[MetadataPartition] = "0"
	md[MetadataOffset] = strconv.FormatInt(offset, 10)
	md[MetadataBatch] = poll
	md[MetadataBatchIndex] = strconv.Itoa(index)
	md[MetadataBatchSize] = strconv.Itoa(size)
	if after != "" {
		md[MetadataBatchAfter] = after
	}
	return msg
}

// A poll emitted while the one before was in flight can be complete first
// (the Router's goroutines run in any order): the worker holds it until
// the poll it follows was applied, so every record's mutations apply in
// offset order.
func TestWorkerAppliesPollsInTheOrderEmitted(t *testing.T) {
	sub := &chanSubscriber{ch: make(chan *message.Message, 8)}
	h := &logHandler{state: map[string][]string{}}
	w, err := NewWorker(sub, discardPublisher{}, h, WorkerConfig{Topic: "muts", DeadLetterTopic: "muts.dlq", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop(context.Background()) }()

	first := []*message.Message{
		pollMessage(t, testMutation("a1", "a"), 0, "p1", "", 0, 2),
		pollMessage(t, testMutation("b1", "b"), 1, "p1", "", 1, 2),
	}
	second := []*message.Message{
		pollMessage(t, testMutation("a2", "a"), 2, "p2", "p1", 0, 2),
		pollMessage(t, testMutation("b2", "b"), 3, "p2", "p1", 1, 2),
	}
	// The second poll arrives whole before the first.
	for _, m := range second {
		sub.ch <- m
	}
	waitFor(t, 10*time.Second, "the second poll held", func() bool { return w.Stats().HeldPolls == 1 })
	if n := h.applied(); n != 0 {
		t.Fatalf("%d mutations applied before the poll they follow arrived", n)
	}
	for _, m := range first {
		sub.ch <- m
	}
	for _, m := range append(first, second...) {
		select {
		case <-m.Acked():
		case <-m.Nacked():
			t.Fatalf("message %s nacked", m.UUID)
		case <-time.After(10 * time.Second):
			t.Fatalf("message %s neither acked nor nacked", m.UUID)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, b := strings.Join(h.state["a"], ","), strings.Join(h.state["b"], ","); a != "a1,a2" || b != "b1,b2" {
		t.Fatalf("applied a: %s, b: %s; want a1,a2 and b1,b2", a, b)
	}
}

// discardPublisher accepts dead letters and drops them.
type discardPublisher struct{}

func (discardPublisher) Publish(string, ...*message.Message) error { return nil }
func (discardPublisher) Close() error                              { return nil }

// gatedHandler blocks its first call until gate is closed (entered is
// closed when it is blocked), then behaves like next.
type gatedHandler struct {
	next    ports.MutationHandler
	gate    chan struct{}
	entered chan struct{}
	calls   atomic.Int64
}

func (g *gatedHandler) ApplyMutations(ctx context.Context, muts []domain.Mutation) []ports.ApplyOutcome {
	if g.calls.Add(1) == 1 {
		close(g.entered)
		<-g.gate
	}
	return g.next.ApplyMutations(ctx, muts)
}

// startPipelined queues first, starts a worker whose handler holds the
// poll of first until later was queued and emitted ahead (pipelined), and
// returns once that poll is released.
func startPipelined(t *testing.T, h ports.MutationHandler, first, later []domain.Mutation) (*Worker, *Subscriber) {
	t.Helper()
	env := newConsumerEnv(t, 1)
	env.submit(t, first...)
	g := &gatedHandler{next: h, gate: make(chan struct{}), entered: make(chan struct{})}
	w, sub, _ := startWith(t, env.brokers, g, nil, SubscriberConfig{RedeliveryDelay: 20 * time.Millisecond}, WorkerConfig{MaxAttempts: 1000})
	select {
	case <-g.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the first poll was not handled")
	}
	env.submit(t, later...)
	waitFor(t, 20*time.Second, "the next poll emitted ahead", func() bool { return sub.Stats().Pipelined >= 1 })
	close(g.gate)
	return w, sub
}

// Pipelining: the poll emitted while the one before is applied holds back
// the mutations of a record that poll parked (they join its queue), and
// applies the rest.
func TestPipelinedPollHoldsBackARecordParkedBefore(t *testing.T) {
	h := &parkHandler{}
	_, sub := startPipelined(t, h, []domain.Mutation{testMutation("stuck", "s")},
		[]domain.Mutation{testMutation("s2", "s"), testMutation("o1", "o")})
	waitFor(t, 20*time.Second, "o1", func() bool { return slices.Contains(h.ids(), "o1") })
	waitFor(t, 20*time.Second, "s's two mutations parked", func() bool { return sub.Stats().ParkedNow == 2 })
	if ids := h.ids(); slices.Contains(ids, "s2") {
		t.Fatalf("applied %v: s2 went before the parked stuck", ids)
	}
	h.stuckOK.Store(true)
	waitFor(t, 20*time.Second, "s2", func() bool { return slices.Contains(h.ids(), "s2") })
	if ids := h.ids(); fmt.Sprint(ids) != "[o1 stuck s2]" {
		t.Fatalf("applied %v, want [o1 stuck s2]", ids)
	}
}

// cancelOnceHandler fails the first delivery of "stuck" as canceled (its
// partition is read again from it) and applies everything else, recording
// the order.
type cancelOnceHandler struct {
	parkHandler
	canceled atomic.Bool
}

func (h *cancelOnceHandler) ApplyMutations(ctx context.Context, muts []domain.Mutation) []ports.ApplyOutcome {
	if len(muts) > 0 && muts[0].ID == "stuck" && h.canceled.CompareAndSwap(false, true) {
		out := make([]ports.ApplyOutcome, len(muts))
		for i := range out {
			out[i].Err = domain.Errorf(domain.CodeCanceled, "canceled")
		}
		return out
	}
	h.stuckOK.Store(true)
	return h.parkHandler.ApplyMutations(ctx, muts)
}

// Pipelining: when the poll before leaves a partition unfinished (it is
// read again from there), the poll emitted ahead applies none of that
// partition's records; they are applied after the re-read, in order.
func TestPipelinedPollHoldsBackAPartitionLeftUnfinished(t *testing.T) {
	h := &cancelOnceHandler{}
	startPipelined(t, h, []domain.Mutation{testMutation("stuck", "s")},
		[]domain.Mutation{testMutation("s2", "s"), testMutation("o1", "o")})
	waitFor(t, 20*time.Second, "o1", func() bool { return slices.Contains(h.ids(), "o1") })
	if ids := h.ids(); fmt.Sprint(ids) != "[stuck s2 o1]" {
		t.Fatalf("applied %v, want [stuck s2 o1]: each once, in offset order", ids)
	}
}

// A record whose headers carry the subscriber's own metadata (a replayed
// dead letter of an older version, another producer) is applied like any
// other: the headers neither make its poll wait for a poll that does not
// exist nor set its log identity. Dead letters drop those entries.
func TestRecordHeadersDoNotStandForSubscriberMetadata(t *testing.T) {
	env := newConsumerEnv(t, 1)
	m, err := NewMutationMessage(testMutation("m1", "k"))
	if err != nil {
		t.Fatal(err)
	}
	m.Metadata.Set(MetadataBatchAfter, "a-poll-that-never-was")
	m.Metadata.Set(MetadataLog, "another-log")
	pub := NewPublisher(newTestClient(t, env.brokers, ClientConfig{}))
	if err := pub.Publish("muts", m); err != nil {
		t.Fatal(err)
	}
	h := &logHandler{state: map[string][]string{}}
	logs := &sourceHandler{next: h}
	startWith(t, env.brokers, logs, nil, SubscriberConfig{LogEpoch: "this-log"}, WorkerConfig{})
	waitFor(t, 20*time.Second, "m1 applied", func() bool { return h.applied() == 1 })
	if got := logs.lastLog.Load(); got == nil || *got != "this-log" {
		t.Fatalf("applied with log identity %v, want this-log", got)
	}

	dl := newDeadLetterMessage(m, "muts", source{partition: 0, offset: 7, known: true}, deadLetterInfo{reason: ReasonApplyFailed}, time.Now())
	for k := range dl.Metadata {
		if isSubscriberMetadata(k) {
			t.Errorf("the dead letter keeps %s", k)
		}
	}
}

// sourceHandler records the log identity of the last mutation it saw.
type sourceHandler struct {
	next    ports.MutationHandler
	lastLog atomic.Pointer[string]
}

func (h *sourceHandler) ApplyMutations(ctx context.Context, muts []domain.Mutation) []ports.ApplyOutcome {
	for _, m := range muts {
		l := m.Source.Log
		h.lastLog.Store(&l)
	}
	return h.next.ApplyMutations(ctx, muts)
}
