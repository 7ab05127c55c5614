package storagetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// fakeStorage answers every write with a revision mismatch for
// ConditionRevision and success otherwise.
type fakeStorage struct{ ports.Storage }

func (fakeStorage) Read(_ context.Context, addrs []domain.Address) []ports.ReadResult {
	return make([]ports.ReadResult, len(addrs))
}

func (fakeStorage) Write(_ context.Context, ops []ports.WriteOp) []ports.WriteResult {
	out := make([]ports.WriteResult, len(ops))
	for i, op := range ops {
		if op.Condition.Kind == ports.ConditionRevision {
			out[i].Err = domain.Errorf(domain.CodeRevisionMismatch, "changed")
		}
	}
	return out
}

func TestDelayedWaitsAndCounts(t *testing.T) {
	d := NewDelayed(fakeStorage{}, 5*time.Millisecond)
	start := time.Now()
	d.Read(context.Background(), make([]domain.Address, 3))
	d.Write(context.Background(), []ports.WriteOp{{}, {Condition: ports.Condition{Kind: ports.ConditionRevision}}})
	if el := time.Since(start); el < 10*time.Millisecond {
		t.Fatalf("two calls took %s, want at least two round trips of 5ms", el)
	}
	want := DelayedStats{Reads: 1, Writes: 1, ReadOps: 3, WriteOps: 2, Conflicts: 1}
	if got := d.Stats(); got != want || got.Calls() != 2 {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow := NewDelayed(fakeStorage{}, time.Hour)
	for _, r := range slow.Write(ctx, make([]ports.WriteOp, 2)) {
		if domain.CodeOf(r.Err) != domain.CodeCanceled {
			t.Fatalf("a write whose context ended: %v", r.Err)
		}
	}
}

// TestDelayedWaitEndsWithItsContext: a call whose context ends during the
// wait fails at once with the context's error, whether the context was
// canceled or its deadline passed; and a wait that is not cut short lasts
// at least the round trip, with both the precise and the timer-only wait.
func TestDelayedWaitEndsWithItsContext(t *testing.T) {
	slow := NewDelayed(fakeStorage{}, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(5*time.Millisecond, cancel)
	done := make(chan []ports.WriteResult, 1)
	go func() { done <- slow.Write(ctx, make([]ports.WriteOp, 1)) }()
	select {
	case got := <-done:
		if domain.CodeOf(got[0].Err) != domain.CodeCanceled {
			t.Fatalf("a write canceled during its wait: %v", got[0].Err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a write canceled during its wait still waits")
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer dcancel()
	if got := slow.Read(dctx, make([]domain.Address, 1)); !errors.Is(got[0].Err, context.DeadlineExceeded) {
		t.Fatalf("a read whose deadline passed during its wait: %v", got[0].Err)
	}
	for name, wait := range map[string]func(context.Context, time.Duration) error{"sleep": sleep, "timerSleep": timerSleep} {
		for range 20 {
			start := time.Now()
			if err := wait(context.Background(), 300*time.Microsecond); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if el := time.Since(start); el < 300*time.Microsecond {
				t.Fatalf("%s of 300µs ended after %s", name, el)
			}
		}
	}
}
