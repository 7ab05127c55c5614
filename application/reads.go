package application

import (
	"context"
	"errors"
	"time"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// readJob is one caller's validated reads (and its waiter in its shard's
// combiner, in the same allocation).
type readJob struct {
	addrs  []domain.Address
	out    []ports.ReadResult
	waiter waiter[*readJob]
}

// readStorage reads addrs from storage: at once, or, with natural batching
// (Config.Batch), together with the reads of the callers that wait while
// another read is at storage. j, when not nil, is a zero readJob to use
// (callers that allocate it with their own per-request state).
//
// It reports whether the caller left the batch carrying its reads (the
// batch may then still read addrs: the caller must not reuse them).
func (s *Service) readStorage(ctx context.Context, j *readJob, addrs []domain.Address) (out []ports.ReadResult, left bool) {
	shard := -1
	if s.reads != nil {
		shard = s.shardOfAddresses(addrs)
	}
	if shard < 0 {
		return s.storageRead(ctx, addrs), false
	}
	if j == nil {
		j = new(readJob)
	}
	j.addrs = addrs
	j.waiter.item, j.waiter.ctx = j, ctx
	if err := s.reads[shard].do(&j.waiter); err != nil {
		// It left the queue, or the batch carrying it (reads may: a
		// read's outcome changes nothing).
		msg := "stopped before the record was read"
		if left = errors.Is(err, errLeftBatch); left {
			err, msg = ctx.Err(), "the request ended while the read was at storage in a batch shared with other requests"
		}
		out := make([]ports.ReadResult, len(addrs))
		for i := range out {
			out[i].Err = domain.Wrap(stoppedCode(err), err, "%s", msg)
		}
		return out, left
	}
	return j.out, false
}

func (s *Service) storageRead(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	start := time.Now()
	got := s.storage.Read(ctx, addrs)
	s.obs.StorageCall(ports.StorageRead, len(addrs), time.Since(start))
	return got
}

// runReads is the read combiner's batch: one storage read for the reads of
// every caller in it, split back in order.
func (s *Service) runReads(ctx context.Context, batch []*waiter[*readJob]) {
	s.obs.Combined(ports.StorageRead, len(batch))
	if len(batch) == 1 {
		j := batch[0].item
		j.out = s.storageRead(ctx, j.addrs)
		return
	}
	n := 0
	for _, w := range batch {
		n += len(w.item.addrs)
	}
	addrs := make([]domain.Address, 0, n)
	for _, w := range batch {
		addrs = append(addrs, w.item.addrs...)
	}
	got := s.storageRead(ctx, addrs)
	for _, w := range batch {
		k := len(w.item.addrs)
		w.item.out, got = got[:k:k], got[k:]
	}
}
