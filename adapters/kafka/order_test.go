package kafka

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// logHandler applies a batch like the application does: one record's
// mutations strictly in slice order. Each record's state is the list of
// the mutation ids applied to it, so any reordering changes it.
type logHandler struct {
	mu       sync.Mutex
	state    map[string][]string
	n        int
	maxBatch int
}

func (h *logHandler) ApplyMutations(_ context.Context, muts []domain.Mutation) []ports.ApplyOutcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.maxBatch = max(h.maxBatch, len(muts))
	for _, m := range muts {
		k := m.Address.Key.StringValue()
		h.state[k] = append(h.state[k], m.ID)
		h.n++
	}
	return make([]ports.ApplyOutcome, len(muts))
}

func (h *logHandler) applied() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// runShuffled queues n mutations over a few records, runs a worker whose
// Router delays every message by a random time before the handler (so the
// handler goroutines reach the batch collector in random order) and
// returns the final states. With stripBatch the subscriber's batch
// metadata is removed first (every message is then a batch of one, applied
// in arrival order).
func runShuffled(t *testing.T, n int, stripBatch bool) (want, got map[string][]string, maxBatch int, ws WorkerStats, ss SubscriberStats) {
	env := newConsumerEnv(t, 2)
	want = map[string][]string{}
	var muts []domain.Mutation
	for i := range n {
		k := fmt.Sprintf("k%d", i%5)
		m := testMutation(fmt.Sprintf("m%04d", i), k)
		muts = append(muts, m)
		want[k] = append(want[k], m.ID)
	}
	env.submit(t, muts...)

	h := &logHandler{state: map[string][]string{}}
	cl, err := NewClient(ClientConfig{Brokers: env.brokers, GroupID: "g", Topic: "muts", SessionTimeout: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sub, err := NewSubscriber(cl, SubscriberConfig{Topic: "muts", MaxPollRecords: 200, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(sub, NewPublisher(cl), h, WorkerConfig{Topic: "muts", DeadLetterTopic: "muts.dlq", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	w.Router().AddMiddleware(func(next message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			if stripBatch {
				delete(msg.Metadata, MetadataBatch)
			}
			rngMu.Lock()
			d := time.Duration(rng.IntN(2000)) * time.Microsecond
			rngMu.Unlock()
			time.Sleep(d) // the randomised scheduling under test, not synchronisation
			return next(msg)
		}
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "every mutation applied", func() bool { return h.applied() >= n })
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return want, h.state, h.maxBatch, w.Stats(), sub.Stats()
}

// Goroutine scheduling cannot reorder one record's mutations: the Router
// runs every message in its own goroutine, here each delayed by a random
// time, yet the final state of every record equals applying its mutations
// sequentially in offset order, and they are still applied in batches.
// The subscriber pipelines here (it emits a poll while the one before is
// applied; TestWorkerAppliesPollsInTheOrderEmitted covers a poll complete
// before the one it follows).
func TestWorkerOrderSurvivesRandomHandlerScheduling(t *testing.T) {
	const n = 2000
	want, got, maxBatch, _, ss := runShuffled(t, n, false)
	if ss.Pipelined == 0 {
		t.Fatalf("subscriber %+v: want pipelined polls", ss)
	}
	for k, ids := range want {
		if strings.Join(got[k], ",") != strings.Join(ids, ",") {
			t.Fatalf("record %s: applied in order %v…, want %v…", k, head(got[k]), head(ids))
		}
	}
	if maxBatch < 2 || maxBatch > 200 {
		t.Fatalf("largest batch %d, want 2…200 (MaxPollRecords)", maxBatch)
	}

	// The check is sharp: the same run applying each message as it
	// arrives (no batch metadata) does reorder.
	want, got, _, _, _ = runShuffled(t, n, true)
	reordered := false
	for k, ids := range want {
		reordered = reordered || strings.Join(got[k], ",") != strings.Join(ids, ",")
	}
	if !reordered {
		t.Fatal("applying messages in arrival order kept every record's order; the test does not exercise scheduling")
	}
}

func head(ids []string) []string { return ids[:min(len(ids), 8)] }
