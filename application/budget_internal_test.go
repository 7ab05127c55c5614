package application

import (
	"context"
	"errors"
	"testing"
	"time"
)

type budgetKey struct{}

// The budget context behaves as context.WithTimeout would: values and
// cancellation of its parent, the earlier deadline, and once it expired an
// error, a closed Done and a cause that agree, also for a context derived
// from it, whether or not Done was asked for before.
func TestBudgetContextAgreesWithWithTimeout(t *testing.T) {
	parent := context.WithValue(context.Background(), budgetKey{}, "v")
	for _, armFirst := range []bool{false, true} {
		b := newBudget(parent, 20*time.Millisecond)
		if armFirst {
			_ = b.Done()
		}
		child, cancelChild := context.WithCancel(b)
		if b.Err() != nil || child.Err() != nil || b.Value(budgetKey{}) != "v" || child.Value(budgetKey{}) != "v" {
			t.Fatalf("armFirst=%v: a fresh budget: err %v, child err %v, value %v", armFirst, b.Err(), child.Err(), b.Value(budgetKey{}))
		}
		if d, ok := b.Deadline(); !ok || time.Until(d) > 20*time.Millisecond {
			t.Fatalf("deadline %v %v", d, ok)
		}
		select {
		case <-child.Done():
		case <-time.After(10 * time.Second): // a failure guard
			t.Fatalf("armFirst=%v: a context derived from the budget did not end with it", armFirst)
		}
		if !errors.Is(b.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(b), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) {
			t.Fatalf("armFirst=%v: err %v cause %v child %v", armFirst, b.Err(), context.Cause(b), child.Err())
		}
		select {
		case <-b.Done():
		default:
			t.Fatalf("armFirst=%v: Done is open after the deadline", armFirst)
		}
		cancelChild()
		b.release()
	}

	// Without Done, expiry is seen by Err alone, and then Cause agrees
	// (under a parent that can be canceled, and is not).
	live, stop := context.WithCancel(parent)
	defer stop()
	b := newBudget(live, time.Nanosecond)
	for b.Err() == nil {
	}
	if !errors.Is(context.Cause(b), context.DeadlineExceeded) {
		t.Fatalf("cause %v after err %v", context.Cause(b), b.Err())
	}
	b.release()

	// The parent's cancellation and its earlier deadline come through.
	p, cancel := context.WithTimeout(parent, time.Hour)
	b = newBudget(p, 2*time.Hour)
	if d, _ := b.Deadline(); time.Until(d) > time.Hour {
		t.Fatalf("deadline %v: want the parent's, the earlier", d)
	}
	cancel()
	if !errors.Is(b.Err(), context.Canceled) {
		t.Fatalf("err %v after the parent was canceled", b.Err())
	}
	<-b.Done()
	b.release()
}
