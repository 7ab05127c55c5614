package storagetest

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Delayed is a ports.Storage decorator for benchmarks and tests: every Read
// and Write call waits RTT before it reaches the wrapped storage, as a
// networked database's round trip would (on Linux the wait ends through the
// network poller, like a database's answer; see sleep), and it counts the calls, the
// operations they carried and the conditional writes that met a concurrent
// change. A call whose context ends during the wait fails as a whole with
// the context's error, without reaching the storage. It is safe for
// concurrent use; RTT 0 only counts.
type Delayed struct {
	ports.Storage
	RTT time.Duration

	reads, writes, readOps, writeOps, conflicts atomic.Int64
}

var _ ports.Storage = (*Delayed)(nil)

// NewDelayed wraps s, adding rtt to every Read and Write call.
func NewDelayed(s ports.Storage, rtt time.Duration) *Delayed {
	return &Delayed{Storage: s, RTT: rtt}
}

// DelayedStats are the counters of a Delayed storage.
type DelayedStats struct {
	// Reads and Writes: the storage calls; ReadOps and WriteOps: the
	// operations they carried.
	Reads, Writes, ReadOps, WriteOps int64
	// Conflicts: conditional writes (ConditionRevision or ConditionAbsent)
	// that failed because the record had changed.
	Conflicts int64
}

// Calls returns the number of storage calls (reads plus writes).
func (s DelayedStats) Calls() int64 { return s.Reads + s.Writes }

// Stats returns the counters.
func (d *Delayed) Stats() DelayedStats {
	return DelayedStats{
		Reads: d.reads.Load(), Writes: d.writes.Load(),
		ReadOps: d.readOps.Load(), WriteOps: d.writeOps.Load(),
		Conflicts: d.conflicts.Load(),
	}
}

// wait sleeps RTT unless ctx ends first.
func (d *Delayed) wait(ctx context.Context) error {
	if d.RTT <= 0 {
		return ctx.Err()
	}
	return sleep(ctx, d.RTT)
}

// timerSleep is sleep on a runtime timer.
func timerSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Read implements ports.Storage.
func (d *Delayed) Read(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	d.reads.Add(1)
	d.readOps.Add(int64(len(addrs)))
	if err := d.wait(ctx); err != nil {
		out := make([]ports.ReadResult, len(addrs))
		for i := range out {
			out[i].Err = domain.AsError(err)
		}
		return out
	}
	return d.Storage.Read(ctx, addrs)
}

// Write implements ports.Storage.
func (d *Delayed) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	d.writes.Add(1)
	d.writeOps.Add(int64(len(ops)))
	if err := d.wait(ctx); err != nil {
		out := make([]ports.WriteResult, len(ops))
		for i := range out {
			out[i].Err = domain.AsError(err)
		}
		return out
	}
	got := d.Storage.Write(ctx, ops)
	for i, r := range got {
		if r.Err == nil || i >= len(ops) {
			continue
		}
		k := ops[i].Condition.Kind
		switch domain.CodeOf(r.Err) {
		case domain.CodeRevisionMismatch, domain.CodeAlreadyExists, domain.CodeNotFound:
			if k == ports.ConditionRevision || k == ports.ConditionAbsent {
				d.conflicts.Add(1)
			}
		}
	}
	return got
}
