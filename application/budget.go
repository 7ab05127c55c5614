package application

import (
	"context"
	"sync"
	"time"
)

// budget is the context a merge profile runs under: its parent's values
// and cancellation, ending at deadline as well. It arms a timer only when
// someone asks for its Done channel (a profile that waits on it, or a
// context derived from it); until then Err looks at the clock. Most
// profiles poll Err and finish in microseconds, so a merge usually costs no
// timer (context.WithTimeout arms and stops one per merge, a measurable
// part of a fold's work).
type budget struct {
	context.Context // the parent
	deadline        time.Time

	mu     sync.Mutex
	armed  context.Context // with deadline, once Done was called
	cancel context.CancelFunc
}

func newBudget(parent context.Context, d time.Duration) *budget {
	return &budget{Context: parent, deadline: time.Now().Add(d)}
}

// Deadline implements context.Context: the earlier of the parent's and
// the budget's.
func (b *budget) Deadline() (time.Time, bool) {
	if d, ok := b.Context.Deadline(); ok && d.Before(b.deadline) {
		return d, true
	}
	return b.deadline, true
}

// Done implements context.Context.
func (b *budget) Done() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.armed == nil {
		b.armed, b.cancel = context.WithDeadline(b.Context, b.deadline)
	}
	return b.armed.Done()
}

// Err implements context.Context.
func (b *budget) Err() error {
	b.mu.Lock()
	armed := b.armed
	b.mu.Unlock()
	if armed != nil {
		return armed.Err()
	}
	if err := b.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(b.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// release stops the timer, if one was armed.
func (b *budget) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cancel != nil {
		b.cancel()
	}
}
