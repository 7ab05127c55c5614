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

// With a deadline on ctx (the worker's time budget of a batch), a mutation
// that keeps failing transiently returns a retryable "parked" outcome
// before the deadline instead of holding the batch, with its record's
// later mutations; the other records are applied.
func TestApplyMutationsParksWhatOutlivesTheBudget(t *testing.T) {
	rec := &recorder{Storage: memory.New(), failWrite: func(_ int, op ports.WriteOp) error {
		if op.Address.Key.StringValue() == "stuck" {
			return domain.Errorf(domain.CodeUnavailable, "db blip")
		}
		return nil
	}}
	s := newService(t, rec, func(c *application.Config) {
		c.Apply.MaxAttempts, c.Apply.BaseBackoff, c.Apply.MaxBackoff = 1000, 20*time.Millisecond, 50*time.Millisecond
	})
	muts := []domain.Mutation{put("stuck", 1), put("ok", 2), put("stuck", 3)}
	for i := range muts {
		muts[i].ID = "m" + string(rune('0'+i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	out := s.ApplyMutations(ctx, muts)
	if el := time.Since(start); el > 400*time.Millisecond {
		t.Fatalf("ApplyMutations took %s, past its 400ms deadline", el)
	}
	if out[1].Err != nil || value(t, s, "ok") != 2 {
		t.Fatalf("the other record: %+v", out[1])
	}
	for _, i := range []int{0, 2} {
		e := domain.AsError(out[i].Err)
		if out[i].Err == nil || !e.Retryable || e.Code != domain.CodeUnavailable || !strings.Contains(e.Error(), "time budget") {
			t.Fatalf("mutation %d: %+v, want a retryable parked outcome", i, out[i])
		}
	}
	if out[0].Attempts < 2 || out[0].Attempts >= 1000 {
		t.Fatalf("attempts %d: want several, bounded by the budget", out[0].Attempts)
	}
	// Without a deadline the same failure is retried until MaxAttempts.
	s2 := newService(t, rec, func(c *application.Config) { c.Apply.MaxAttempts = 3 })
	out = s2.ApplyMutations(context.Background(), muts[:1])
	if e := domain.AsError(out[0].Err); e.Retryable || !strings.Contains(e.Error(), "retries exhausted after 3 attempts") {
		t.Fatalf("without a budget: %+v", out[0])
	}
	// Cancellation (not the deadline) still reports CodeCanceled.
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if out := s.ApplyMutations(cctx, muts[1:2]); domain.CodeOf(out[0].Err) != domain.CodeCanceled {
		t.Fatalf("canceled: %v", out[0].Err)
	}
}
