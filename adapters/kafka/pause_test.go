package kafka

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// pausableStore emulates the application over a database that can pause:
// while paused, a batch blocks until the database resumes or the batch's
// context ends (then every mutation is parked when the time budget ran
// out, canceled otherwise, like Service.ApplyMutations). It keeps applied
// marks (a redelivered mutation is skipped) and checks that each record's
// mutations ("key-seq") apply exactly once, in order.
type pausableStore struct {
	mu       sync.Mutex
	resumed  chan struct{} // nil while running
	last     map[string]int
	applied  int
	problems []string
}

func newPausableStore() *pausableStore { return &pausableStore{last: map[string]int{}} }

func (s *pausableStore) pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resumed == nil {
		s.resumed = make(chan struct{})
	}
}

func (s *pausableStore) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resumed != nil {
		close(s.resumed)
		s.resumed = nil
	}
}

func (s *pausableStore) ApplyMutations(ctx context.Context, muts []domain.Mutation) []ports.ApplyOutcome {
	out := make([]ports.ApplyOutcome, len(muts))
	s.mu.Lock()
	resumed := s.resumed
	s.mu.Unlock()
	if resumed != nil {
		select {
		case <-resumed:
		case <-ctx.Done():
			_, budgeted := ctx.Deadline()
			for i := range out {
				out[i] = ports.ApplyOutcome{Attempts: 1, Err: domain.Errorf(domain.CodeCanceled, "stopped before the mutation was applied")}
				if budgeted && ctx.Err() == context.DeadlineExceeded {
					out[i].Err = &domain.Error{Code: domain.CodeUnavailable, Retryable: true, Message: "not applied within the worker's time budget (1 attempts); delivered again later"}
				}
			}
			return out
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range muts {
		out[i] = ports.ApplyOutcome{Attempts: 1}
		key, seqs, _ := strings.Cut(m.ID, "-")
		seq, _ := strconv.Atoi(seqs)
		switch last := s.last[key]; {
		case seq <= last:
			out[i].Skipped = true // the record's applied mark
		case seq != last+1:
			s.problems = append(s.problems, fmt.Sprintf("%s applied after %s-%d", m.ID, key, last))
			fallthrough
		default:
			s.last[key] = seq
			s.applied++
		}
	}
	return out
}

func (s *pausableStore) state() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied, append([]string(nil), s.problems...)
}

// The database pauses past the batch's time budget under a steady load
// of many records on few partitions (the db-pause fault trial): every
// mutation is still applied, exactly once and in its record's order, soon
// after the database resumes.
// The db-pause trial scaled down 10x: redelivery delay, batch budget, pause.
const pauseRedelivery, pauseBudget, pauseFor = 100 * time.Millisecond, 300 * time.Millisecond, 800 * time.Millisecond

func TestWorkersApplyEverythingAfterADatabasePause(t *testing.T) {
	const keys, perKey = 8, 50
	env := newConsumerEnv(t, 4)
	store := newPausableStore()
	sc := SubscriberConfig{MaxPollRecords: 100, RedeliveryDelay: pauseRedelivery}
	wc := WorkerConfig{BatchTimeout: pauseBudget, MaxAttempts: 1000}
	startWith(t, env.brokers, store, nil, sc, wc)
	startWith(t, env.brokers, store, nil, sc, wc)
	var submitted sync.WaitGroup
	submitted.Add(1)
	go func() {
		defer submitted.Done()
		for seq := 1; seq <= perKey; seq++ {
			muts := make([]domain.Mutation, 0, keys)
			for k := range keys {
				key := "k" + strconv.Itoa(k)
				muts = append(muts, testMutation(key+"-"+strconv.Itoa(seq), key))
			}
			env.submit(t, muts...)
			if seq == perKey/5 {
				store.pause()
				time.AfterFunc(pauseFor, store.resume)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	submitted.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for {
		applied, problems := store.state()
		if len(problems) > 0 {
			t.Fatalf("applied out of order: %v", problems)
		}
		if applied == keys*perKey {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("applied %d of %d mutations 20 s after the load", applied, keys*perKey)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
