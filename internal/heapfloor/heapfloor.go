// Package heapfloor keeps the Go garbage collector from running while the
// heap is still small: it raises the collector's percentage (GOGC) after
// each collection so that the next one starts no earlier than when the
// heap reaches a floor, and leaves it at its base value once the live
// heap is large enough for that to happen anyway.
//
// Go sets the next collection's heap goal at the live heap plus GOGC % of
// it (and of the goroutine stacks and global variables), and at least
// 4 MiB × GOGC / 100. A server whose live heap is a few MiB of its
// libraries' tables therefore collects every few MiB it allocates, and
// each collection marks those tables again; with a floor of 32 MiB it
// collects several times less often, for at most the floor's bytes of
// extra heap. Above the floor nothing changes: the goal is GOGC's own,
// and GOMEMLIMIT still makes the collector work harder near its limit.
//
// Tuning runs on the runtime's finalizer goroutine once per collection
// (one read of runtime/metrics and, when the percentage changes, one
// debug.SetGCPercent). It overrides percentages set with
// debug.SetGCPercent elsewhere in the process while it runs.
package heapfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Default is the sink binary's floor (SINK_GC_HEAP_FLOOR_BYTES).
const Default = 32 << 20

// heapMinimum is Go's smallest heap goal at GOGC=100 (it scales with
// GOGC). A runtime built with a smaller one only lowers the goals that
// Percent aims at, never raises them past the floor.
const heapMinimum = 4 << 20

// Percent returns the GOGC percentage that puts the next collection's
// heap goal as close to floor as it can without going past it, given the
// live heap (bytes marked by the last collection), the scanned roots
// (goroutine stacks and globals) and the base percentage: never less than
// base, and base itself when base's goal already reaches the floor.
func Percent(floor uint64, base int, live, roots uint64) int {
	floor = min(floor, 1<<50) // no overflow below
	if base < 0 || floor <= live {
		return base
	}
	scaled := live + roots // what GOGC is a percentage of
	p := floor * 100 / heapMinimum
	if scaled > 0 {
		p = min(p, (floor-live)*100/scaled)
	}
	if p <= uint64(base) {
		return base
	}
	return int(min(p, 1<<30))
}

// Start begins tuning the collector for floor bytes and returns a
// function that stops it and restores the percentage found at the start
// (GOGC, or 100). It does nothing with a floor of 0 or when the
// collector is off (GOGC=off). One tuner runs at a time: starting a
// second one while another runs does nothing either.
func Start(floor uint64) (stop func()) {
	base := int(read(gogc)[0].Value.Uint64())
	if floor == 0 || base < 0 || !running.CompareAndSwap(false, true) {
		return func() {}
	}
	t := &tuner{floor: floor, base: base, last: base, samples: read(live, stacks, globals)}
	t.adjust()
	runtime.SetFinalizer(&sentinel{}, t.afterCollection)
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			t.stopped = true
			debug.SetGCPercent(base)
			t.mu.Unlock()
			running.Store(false)
		})
	}
}

const (
	gogc    = "/gc/gogc:percent"
	live    = "/gc/heap/live:bytes"
	stacks  = "/gc/scan/stack:bytes"
	globals = "/gc/scan/globals:bytes"
)

var running atomic.Bool

func read(names ...string) []metrics.Sample {
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	return s
}

type tuner struct {
	floor uint64
	base  int

	mu      sync.Mutex // orders adjust with stop
	stopped bool
	last    int // the percentage set last
	samples []metrics.Sample
}

// sentinel is garbage as soon as it is made; its finalizer runs after
// the collection that finds it, and sets itself again for the next one.
// It is larger than the runtime's tiny allocations (which may share a
// block with other objects and so be collected late).
type sentinel struct{ _ [32]byte }

func (t *tuner) afterCollection(s *sentinel) {
	if t.adjust() {
		runtime.SetFinalizer(s, t.afterCollection)
	}
}

// adjust sets the percentage for the heap the last collection left; it
// reports false once the tuner is stopped.
func (t *tuner) adjust() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.samples)
	p := Percent(t.floor, t.base, t.samples[0].Value.Uint64(), t.samples[1].Value.Uint64()+t.samples[2].Value.Uint64())
	if p != t.last {
		debug.SetGCPercent(p)
		t.last = p
	}
	adjusted(p)
	return true
}

// adjusted is called after each adjustment (tests await it).
var adjusted = func(int) {}
