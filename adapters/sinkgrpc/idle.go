package sinkgrpc

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// An idle server allocates nothing, so the Go runtime does not collect
// (it forces a collection only every two minutes) and keeps the heap it
// grew for the last load: 27 MiB of freed pages were still mapped a minute
// after a burst of 8 MiB batches ended, and their garbage with them.
// idleCollector runs one collection when the Sink API has had no request
// for idlePeriod after serving some, and returns the freed pages to the
// operating system (debug.FreeOSMemory). A collection alone (runtime.GC)
// let the background scavenger return only the pages above the new heap
// goal: the goal's headroom, 15-17 MiB after the burst, stayed mapped,
// and the process at 59-63 MiB. It costs one atomic add per request, and
// one collection (of a small live heap) and one scavenge per return to
// idle: a server under steady load never runs it, an idle one runs it
// once.
type idleCollector struct {
	period  time.Duration
	collect func()

	requests atomic.Uint64
	armed    atomic.Bool // a check is scheduled

	mu   sync.Mutex // serialises checks (one is scheduled at a time)
	seen uint64     // requests at the last check
}

// idlePeriod is how long the API must be without requests for the
// server to count as idle.
const idlePeriod = 10 * time.Second

func newIdleCollector() *idleCollector {
	return &idleCollector{period: idlePeriod, collect: debug.FreeOSMemory}
}

// request notes an API request (and schedules a check when none is).
func (c *idleCollector) request() {
	c.requests.Add(1)
	if !c.armed.Load() && c.armed.CompareAndSwap(false, true) {
		time.AfterFunc(c.period, c.check)
	}
}

// check runs every period while requests come, and collects once when a
// whole period passed without one.
func (c *idleCollector) check() {
	c.mu.Lock()
	n := c.requests.Load()
	busy := n != c.seen
	c.seen = n
	c.mu.Unlock()
	if busy {
		time.AfterFunc(c.period, c.check)
		return
	}
	c.armed.Store(false)
	c.collect()
	// A request that came between the count and disarming scheduled
	// nothing: check again for it.
	if c.requests.Load() != n && c.armed.CompareAndSwap(false, true) {
		time.AfterFunc(c.period, c.check)
	}
}
