package kafka

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// resolvingHandler is a fakeHandler that is also a ports.MutationResolver:
// resolutions[id] are its answers for mutation id, one per call (the last
// one repeats).
type resolvingHandler struct {
	fakeHandler
	rmu         sync.Mutex
	resolutions map[string][]ports.Resolution
	asked       []string
}

func (h *resolvingHandler) ResolveMutations(_ context.Context, muts []domain.Mutation) []ports.Resolution {
	h.rmu.Lock()
	defer h.rmu.Unlock()
	out := make([]ports.Resolution, len(muts))
	for i, m := range muts {
		h.asked = append(h.asked, m.ID)
		rs := h.resolutions[m.ID]
		if len(rs) == 0 {
			out[i] = ports.ResolutionNotApplied
			continue
		}
		out[i] = rs[0]
		if len(rs) > 1 {
			h.resolutions[m.ID] = rs[1:]
		}
	}
	return out
}

func (h *resolvingHandler) askedIDs() []string {
	h.rmu.Lock()
	defer h.rmu.Unlock()
	return slices.Clone(h.asked)
}

func deadLetterIDs(t *testing.T, brokers []string) []string {
	t.Helper()
	letters, err := ReadDeadLetters(context.Background(), brokers, "muts.dlq")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range letters {
		ids = append(ids, d.MutationID)
	}
	sort.Strings(ids)
	return ids
}

// A dead letter is only ever a mutation that was not applied: a mutation
// its record's mark has passed is skipped (superseded), not dead-lettered;
// a failure that may hide a write is resolved against its record first
// (applied: acked; unknown: delivered again; not applied: dead-lettered);
// a failure that says nothing was written is dead-lettered without a
// look.
func TestWorkerDeadLettersOnlyMutationsThatWereNotApplied(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t,
		testMutation("superseded", "k1"),
		testMutation("unknown-but-applied", "k2"),
		testMutation("unavailable-not-applied", "k3"),
		testMutation("invalid", "k4"),
		testMutation("unknown-then-readable", "k5"),
		testMutation("fine", "k6"),
	)
	var mu sync.Mutex
	calls := map[string]int{}
	h := &resolvingHandler{resolutions: map[string][]ports.Resolution{
		"unknown-but-applied":     {ports.ResolutionApplied},
		"unavailable-not-applied": {ports.ResolutionNotApplied},
		// The record cannot be read the first time; then the mutation is
		// delivered again and applies.
		"unknown-then-readable": {ports.ResolutionUnknown},
	}}
	h.outcome = func(_ context.Context, m domain.Mutation) ports.ApplyOutcome {
		mu.Lock()
		calls[m.ID]++
		n := calls[m.ID]
		mu.Unlock()
		switch m.ID {
		case "superseded":
			return ports.ApplyOutcome{Attempts: 1, Skipped: true, Superseded: true}
		case "unknown-but-applied":
			return ports.ApplyOutcome{Err: domain.Errorf(domain.CodeOutcomeUnknown, "retries exhausted: timed out after sending"), Attempts: 5}
		case "unavailable-not-applied":
			return ports.ApplyOutcome{Err: domain.Errorf(domain.CodeUnavailable, "retries exhausted: no connection"), Attempts: 5}
		case "invalid":
			return ports.ApplyOutcome{Err: domain.Errorf(domain.CodeInvalidArgument, "the profile rejected the intent"), Attempts: 1}
		case "unknown-then-readable":
			if n == 1 {
				return ports.ApplyOutcome{Err: domain.Errorf(domain.CodeOutcomeUnknown, "retries exhausted"), Attempts: 5}
			}
		}
		return ports.ApplyOutcome{Attempts: 1}
	}
	c, _ := env.start(t, h, 100)
	waitFor(t, 20*time.Second, "every mutation settled", func() bool {
		st := c.Stats()
		return st.DeadLettered >= 2 && slices.Contains(h.appliedIDs(), "unknown-then-readable") && st.Commits >= 1
	})
	if got, want := deadLetterIDs(t, env.brokers), []string{"invalid", "unavailable-not-applied"}; !slices.Equal(got, want) {
		t.Fatalf("dead letters %v, want %v", got, want)
	}
	asked := h.askedIDs()
	sort.Strings(asked)
	if want := []string{"unavailable-not-applied", "unknown-but-applied", "unknown-then-readable"}; !slices.Equal(asked, want) {
		t.Fatalf("resolved %v, want %v (only failures that may hide a write)", asked, want)
	}
	st := c.Stats()
	if st.Superseded != 1 || st.Resolved != 1 || st.DeadLettered != 2 {
		t.Fatalf("stats %+v: want 1 superseded, 1 resolved as applied, 2 dead letters", st)
	}
}

// fencedSubscriber is a Subscriber whose group coordinator always says
// that the member lost its partitions (as it would to a worker that was
// frozen past its session timeout and woke up in the middle of a batch).
type fencedSubscriber struct {
	*Subscriber
	checks int
	mu     sync.Mutex
}

func (f *fencedSubscriber) CheckFence(context.Context) error {
	f.mu.Lock()
	f.checks++
	f.mu.Unlock()
	return ErrFenced
}

// A worker that lost its partitions writes no dead letters for them (the
// partitions' new owner decides), except those of mutations it overtook
// (the handler says so: ports.ApplyOutcome.Overtaken): it wrote a later
// mutation of the same record over a mark that had not reached them, so
// the new owner would skip them as superseded. Those need no resolution,
// however uncertain their own failure: nobody applied them.
func TestFencedWorkerWithholdsDeadLetters(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t,
		testMutation("overtaken", "k1"), testMutation("after-overtaken", "k1"),
		testMutation("alone", "k2"),
	)
	h := &resolvingHandler{fakeHandler: fakeHandler{outcome: func(_ context.Context, m domain.Mutation) ports.ApplyOutcome {
		switch m.ID {
		case "overtaken":
			return ports.ApplyOutcome{Err: budgetRanOut(), Attempts: 1, Overtaken: true}
		case "alone":
			return ports.ApplyOutcome{Err: domain.Errorf(domain.CodeInvalidArgument, "the profile rejected the intent"), Attempts: 1}
		}
		return ports.ApplyOutcome{Attempts: 1}
	}}, resolutions: map[string][]ports.Resolution{"overtaken": {ports.ResolutionApplied}}}
	w, sub := startFencedWorker(t, env, h)
	waitFor(t, 20*time.Second, "the batch handled", func() bool {
		st := w.Stats()
		return st.DeadLettered+st.Resolved >= 1 && st.Withheld >= 1
	})
	if got := deadLetterIDs(t, env.brokers); !slices.Equal(got, []string{"overtaken"}) {
		t.Fatalf("dead letters %v, want only [overtaken]", got)
	}
	if asked := h.askedIDs(); len(asked) != 0 {
		t.Fatalf("resolved %v: an overtaken failure needs no resolution", asked)
	}
	sub.mu.Lock()
	checks := sub.checks
	sub.mu.Unlock()
	if checks == 0 {
		t.Fatal("the worker did not ask the group coordinator before writing dead letters")
	}
}

// budgetRanOut is the failure of a merge whose profile did not finish
// within its time budget: permanent, and uncertain for the worker (see
// uncertain).
func budgetRanOut() *domain.Error {
	return &domain.Error{Code: domain.CodeResourceExhausted, Message: "merge profile \"p\" did not finish within the merge time budget"}
}

// startFencedWorker starts a worker of handler h on env's topic "muts"
// whose subscriber reports it fenced (fencedSubscriber).
func startFencedWorker(t *testing.T, env consumerEnv, h ports.MutationHandler) (*Worker, *fencedSubscriber) {
	t.Helper()
	cl, err := NewClient(ClientConfig{Brokers: env.brokers, GroupID: "g", Topic: "muts", SessionTimeout: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := NewSubscriber(cl, SubscriberConfig{Topic: "muts", MaxPollRecords: 100, Logger: quietLogger(), RedeliveryDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sub := &fencedSubscriber{Subscriber: inner}
	w, err := NewWorker(sub, NewPublisher(cl), h, WorkerConfig{Topic: "muts", DeadLetterTopic: "muts.dlq", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, w, cl, 5*time.Second) })
	return w, sub
}

// The frozen-worker race with the ring rotated: while this worker was
// frozen, the partition's new owner applied the failed mutation f and
// more than the ring's size of later mutations of its record, so f's ID
// left the record's ring; this worker's write of a later mutation of the
// record still landed after. It did not overtake f (the handler found the
// record's mark past f: Overtaken is false), so it must not dead-letter f
// although a later mutation of the batch was written and f's record now
// answers "superseded": a replay would apply f twice. (Before, the worker
// inferred overtaking from any later write of the record in the batch.)
func TestFencedWorkerDoesNotDeadLetterWhatAnotherWorkerHandled(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t,
		testMutation("handled-elsewhere", "k1"), testMutation("written-after", "k1"),
		testMutation("alone", "k2"),
	)
	h := &resolvingHandler{fakeHandler: fakeHandler{outcome: func(_ context.Context, m domain.Mutation) ports.ApplyOutcome {
		switch m.ID {
		case "handled-elsewhere":
			return ports.ApplyOutcome{Err: budgetRanOut(), Attempts: 1}
		case "alone":
			return ports.ApplyOutcome{Err: domain.Errorf(domain.CodeInvalidArgument, "the profile rejected the intent"), Attempts: 1}
		}
		return ports.ApplyOutcome{Attempts: 1}
	}}, resolutions: map[string][]ports.Resolution{"handled-elsewhere": {ports.ResolutionSuperseded}}}
	w, _ := startFencedWorker(t, env, h)
	waitFor(t, 20*time.Second, "the batch handled", func() bool {
		st := w.Stats()
		return st.DeadLettered+st.Resolved >= 1 && st.Withheld >= 1
	})
	if got := deadLetterIDs(t, env.brokers); len(got) != 0 {
		t.Fatalf("dead letters %v, want none: another worker handled the failed mutation", got)
	}
	if st := w.Stats(); st.Withheld != 1 || st.Resolved != 1 || st.Superseded != 1 || st.DeadLettered != 0 {
		t.Fatalf("stats %+v: want the certain failure withheld, the uncertain one resolved as superseded, no dead letter", st)
	}
}

// CheckFence asks the group coordinator: a member of a stable group owns
// its partitions; while the group rebalances (another member joined, and
// this one still holds its poll), it may not.
func TestCheckFenceAsksTheCoordinator(t *testing.T) {
	env := newConsumerEnv(t, 2)
	env.submit(t, testMutation("a", "a"), testMutation("b", "b"))
	newMember := func() *Subscriber {
		cl, err := NewClient(ClientConfig{Brokers: env.brokers, GroupID: "fence", Topic: "muts", SessionTimeout: 6 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cl.AllowRebalance() // a client that holds a poll cannot leave the group
			cl.Close()
		})
		s, err := NewSubscriber(cl, SubscriberConfig{Topic: "muts", Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	poll := func(s *Subscriber) int {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		return s.client.PollRecords(ctx, 10).NumRecords()
	}
	check := func(s *Subscriber) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return s.CheckFence(ctx)
	}
	a := newMember()
	// Polling joins the group; with BlockRebalanceOnPoll the member keeps
	// its partitions until it allows a rebalance.
	waitFor(t, 20*time.Second, "the first member to poll", func() bool { return poll(a) > 0 })
	if err := check(a); err != nil {
		t.Fatalf("a stable group's only member is fenced: %v", err)
	}
	b := newMember()
	go poll(b) // joins: the group rebalances while a holds its poll
	waitFor(t, 20*time.Second, "the coordinator to answer the first member with a rebalance", func() bool {
		return errors.Is(check(a), ErrFenced)
	})
	err := check(a)
	if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "REBALANCE_IN_PROGRESS") {
		t.Fatalf("CheckFence during a rebalance: %v", err)
	}
	// Both let the rebalance through and poll again: a stable group of two.
	waitFor(t, 30*time.Second, "the group to settle with both members current", func() bool {
		a.client.AllowRebalance()
		b.client.AllowRebalance()
		poll(a)
		poll(b)
		return check(a) == nil && check(b) == nil
	})
}

// A static member (InstanceID) that comes back within its session timeout
// takes its partitions back at once: no waiting for the session of the
// member it replaces to end.
func TestStaticMemberTakesItsPartitionsBackAtOnce(t *testing.T) {
	env := newConsumerEnv(t, 2)
	env.submit(t, testMutation("a", "a"), testMutation("b", "b"))
	const session = 30 * time.Second
	member := func() *kgo.Client {
		cl, err := NewClient(ClientConfig{Brokers: env.brokers, GroupID: "static", Topic: "muts", SessionTimeout: session,
			RebalanceTimeout: session, InstanceID: "worker-0"})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	poll := func(cl *kgo.Client, within time.Duration) int {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		n := cl.PollRecords(ctx, 10).NumRecords()
		cl.AllowRebalance()
		return n
	}
	first := member()
	if n := poll(first, 20*time.Second); n != 2 {
		t.Fatalf("the first member polled %d records, want 2", n)
	}
	first.Close() // a static member does not leave the group: as if it died
	adm := kadm.NewClient(newTestClient(t, env.brokers, ClientConfig{}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gs, err := adm.DescribeGroups(ctx, "static")
	if err != nil {
		t.Fatal(err)
	}
	if g := gs["static"]; len(g.Members) != 1 || g.Members[0].InstanceID == nil || *g.Members[0].InstanceID != "worker-0" {
		t.Fatalf("after the static member closed, the group has %+v; want it still holding worker-0", g.Members)
	}
	start := time.Now()
	second := member()
	defer second.Close()
	// Nothing was committed: the same instance gets both records again,
	// long before the first one's 30 s session could have ended.
	if n := poll(second, session/2); n != 2 {
		t.Fatalf("the restarted member polled %d records within %s, want 2", n, session/2)
	}
	t.Logf("the restarted static member had its partitions back in %s (session timeout %s)", time.Since(start).Round(time.Millisecond), session)
}

// The worker hands the handler a fence check (ports.FenceCheck) that asks
// the group coordinator: the handler calls it before a write that would
// overtake a failed mutation, so a worker that lost its partitions makes
// no such write.
func TestWorkerGivesTheHandlerItsFenceCheck(t *testing.T) {
	env := newConsumerEnv(t, 1)
	env.submit(t, testMutation("probe", "k1"))
	got := make(chan error, 1)
	h := &resolvingHandler{fakeHandler: fakeHandler{outcome: func(ctx context.Context, m domain.Mutation) ports.ApplyOutcome {
		check := ports.FenceCheckOf(ctx)
		if check == nil {
			got <- errors.New("no fence check in the handler's context")
		} else {
			got <- check(ctx)
		}
		return ports.ApplyOutcome{Attempts: 1}
	}}}
	_, sub := startFencedWorker(t, env, h)
	var err error
	select {
	case err = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the mutation never reached the handler")
	}
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("the fence check answered %v, want ErrFenced", err)
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.checks == 0 {
		t.Fatal("the fence check did not ask the group coordinator")
	}
}
