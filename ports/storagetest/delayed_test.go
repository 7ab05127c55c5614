package storagetest

import (
	"context"
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
