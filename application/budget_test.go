package application_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// spinProfile burns CPU, polling ctx.Err, until its context ends (with
// wait, it waits on ctx.Done instead), or a safety cap passes, so that a
// missing budget fails the test instead of hanging it; then it returns
// ctx's error, or with late a document, like a profile that ignores its
// context.
type spinProfile struct{ late, wait bool }

func (spinProfile) Name() string           { return "spin" }
func (spinProfile) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (p spinProfile) Merge(ctx context.Context, _ ports.MergeInput) (domain.Document, error) {
	limit := time.Now().Add(5 * time.Second)
	if p.wait {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(limit)):
		}
	}
	x := 0
	for ctx.Err() == nil && time.Now().Before(limit) {
		for i := 0; i < 10000; i++ {
			x += i
		}
	}
	if p.late || ctx.Err() == nil {
		return domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{}`)}, nil
	}
	return domain.Document{}, ctx.Err()
}

func spinService(t *testing.T, budget time.Duration, p spinProfile) *application.Service {
	t.Helper()
	cfg := application.DefaultConfig()
	cfg.Merge.Timeout = budget
	s, err := application.NewService(cfg, memory.New(), []ports.MergeProfile{p})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func spinMerge() domain.Mutation {
	m := merge("k", 1)
	m.Merge.Profile = "spin"
	return m
}

func TestMergeRunsWithinItsBudget(t *testing.T) {
	const budget = 100 * time.Millisecond
	for _, p := range []spinProfile{{}, {late: true}, {wait: true}, {wait: true, late: true}} {
		s := spinService(t, budget, p)
		start := time.Now()
		res, err := s.Write(context.Background(), []domain.Mutation{spinMerge()}, application.WaitUntilApplied)
		elapsed := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if elapsed > budget+time.Second {
			t.Fatalf("%+v: the merge took %v with a budget of %v", p, elapsed, budget)
		}
		expectPrefixed(t, "over budget", res[0].Err, domain.CodeResourceExhausted,
			`operations[0] (merge): intent: merge profile "spin" did not finish within the merge time budget of 100ms`)
		if res[0].Err.Retryable {
			t.Fatal("an over-budget merge must not be retried as it is")
		}
		// Nothing was written.
		if r, _ := s.Read(context.Background(), []domain.Address{addr("k")}); r[0].Status != application.StatusNotFound {
			t.Fatalf("%+v: an over-budget merge was written: %+v", p, r[0])
		}
	}

	// The worker dead-letters it at once instead of retrying.
	s := spinService(t, budget, spinProfile{})
	m := spinMerge()
	m.ID = "m1"
	out := s.ApplyMutations(context.Background(), []domain.Mutation{m})
	if out[0].Attempts != 1 || domain.CodeOf(out[0].Err) != domain.CodeResourceExhausted || !strings.HasPrefix(out[0].Err.Error(), "mutation m1 (merge): intent: ") {
		t.Fatalf("worker: %+v", out[0])
	}
}

func TestMergeStopsWithTheClient(t *testing.T) {
	for _, p := range []spinProfile{{}, {wait: true}} {
		s := spinService(t, 10*time.Second, p)
		const deadline = 100 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		start := time.Now()
		res, err := s.Write(ctx, []domain.Mutation{spinMerge()}, application.WaitUntilApplied)
		cancel()
		if elapsed := time.Since(start); elapsed > deadline+time.Second {
			t.Fatalf("%+v: the merge took %v after a client deadline of %v", p, elapsed, deadline)
		}
		if err != nil {
			t.Fatal(err)
		}
		// The client's deadline, not the budget: DEADLINE_EXCEEDED.
		expectPrefixed(t, "client deadline", res[0].Err, domain.CodeOutcomeUnknown, `operations[0] (merge): intent: merge profile "spin" was stopped`)

		ctx, cancel = context.WithCancel(context.Background())
		s2 := spinService(t, 10*time.Second, p)
		done := make(chan error)
		go func() {
			res, err := s2.Write(ctx, []domain.Mutation{spinMerge()}, application.WaitUntilApplied)
			if err == nil { // (canceled before it arrived: refused whole)
				err = res[0].Err
			}
			done <- err
		}()
		cancel()
		select {
		case err := <-done:
			if domain.CodeOf(err) != domain.CodeCanceled {
				t.Fatalf("%+v: canceled merge: %v", p, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%+v: a canceled merge kept running", p)
		}
	}
}

func TestMergeTimeoutIsValidated(t *testing.T) {
	cfg := application.DefaultConfig()
	if cfg.Merge.Timeout != 2*time.Second {
		t.Fatalf("default merge timeout %v", cfg.Merge.Timeout)
	}
	cfg.Merge.Timeout = 0
	cfg.Merge.MaxAttempts = 0
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "merge: timeout must be positive") || !strings.Contains(err.Error(), "max attempts") {
		t.Fatalf("%v", err)
	}
}
