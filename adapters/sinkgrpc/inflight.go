package sinkgrpc

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// The in-flight count packs the Sink RPCs running (the high bits) and
// their operations (the low opsBits) into one integer, so that entering
// costs one compare-and-swap (again when another request entered or left
// meanwhile) and leaving one atomic addition, about what counting RPCs
// alone did.
const (
	opsBits = 36
	opsMask = 1<<opsBits - 1
	oneRPC  = 1 << opsBits
	// maxCounted caps the operations one request is counted with (a
	// request's message bounds them; the application rejects requests
	// over SINK_MAX_OPERATIONS), so that the operations of the RPCs that
	// can be in flight never reach the RPC bits.
	maxCounted = 1 << 24
)

// Retry delays of refusals: the time the operations in flight take to
// drain at the rate at which they recently completed, within these bounds,
// and spread ±50% so that refused clients do not all come back at once.
const (
	minRetryDelay = 10 * time.Millisecond
	maxRetryDelay = time.Second
	// initialRetryDelay is the delay before any drain rate is known.
	initialRetryDelay = 100 * time.Millisecond
	// rateWindow is the shortest time over which the drain rate is
	// measured; a window longer than staleWindow (no refusal for that
	// long) is not measured but restarted.
	rateWindow  = 100 * time.Millisecond
	staleWindow = 2 * time.Second
)

// overloadMessage starts the message of every refusal of the in-flight
// bound (the interceptor logs them at debug level: under overload they
// are the bulk of the requests).
const overloadMessage = "server overloaded"

// admission counts the Sink RPCs and operations in flight and refuses
// requests that would take the operations over max (admission control).
// A request alone is always admitted, however many operations it has.
type admission struct {
	load atomic.Int64 // RPCs << opsBits | operations
	done atomic.Int64 // operations finished, for the drain rate
	max  int64        // math.MaxInt64: no bound

	// The drain rate's window, measured by refusals only (TryLock: a
	// refusal never waits for another); delay is its last estimate.
	mu     sync.Mutex
	at     time.Time
	doneAt int64
	delay  atomic.Int64 // nanoseconds
	now    func() time.Time
}

func newAdmission() *admission {
	a := &admission{max: math.MaxInt64, now: time.Now}
	a.delay.Store(int64(initialRetryDelay))
	return a
}

// enter counts a request of ops operations in, or refuses it with a
// retryable RESOURCE_EXHAUSTED status error carrying a retry delay.
//
// A request is counted in only once it is admitted: the count never
// includes one that is refused, not even for an instant, so that what
// InFlight and InFlightOperations read (drains, tests, operators) never
// exceeds the bound. (Adding first and taking a refused request out
// again let a reader see the bound passed by the refused request.)
func (a *admission) enter(ops int) error {
	n := int64(min(ops, maxCounted))
	for {
		v := a.load.Load()
		if others := v & opsMask; others+n > a.max && others > 0 {
			return a.refuse(others, n)
		}
		if a.load.CompareAndSwap(v, v+oneRPC+n) {
			return nil
		}
	}
}

// leave counts a request of ops operations out (it finished).
func (a *admission) leave(ops int) {
	n := int64(min(ops, maxCounted))
	a.load.Add(-(oneRPC + n))
	a.done.Add(n)
}

func (a *admission) rpcs() int       { return int(a.load.Load() >> opsBits) }
func (a *admission) operations() int { return int(a.load.Load() & opsMask) }

// refuse returns the refusal of a request of n operations while others
// were in flight.
func (a *admission) refuse(others, n int64) error {
	d := a.retryDelay(others)
	return StatusError(retryLater(fmt.Sprintf("%s: %d operations in flight, and the request's %d would exceed the bound of %d; retry after %s",
		overloadMessage, others, n, a.max, roundUp(d)), d))
}

// retryDelay returns the delay a refused client should wait: about the
// time the operations in flight take to drain, jittered.
func (a *admission) retryDelay(inflight int64) time.Duration {
	if a.mu.TryLock() {
		now := a.now()
		done := a.done.Load()
		switch el := now.Sub(a.at); {
		case el > staleWindow:
			a.at, a.doneAt = now, done
		case el >= rateWindow:
			d := maxRetryDelay
			if finished := done - a.doneAt; finished > 0 {
				d = time.Duration(float64(inflight) * float64(el) / float64(finished))
			}
			a.delay.Store(int64(min(max(d, minRetryDelay), maxRetryDelay)))
			a.at, a.doneAt = now, done
		}
		a.mu.Unlock()
	}
	d := time.Duration(a.delay.Load())
	return d/2 + rand.N(d)
}
