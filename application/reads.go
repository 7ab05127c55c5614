package application

import (
	"context"
	"errors"
	"time"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// readJob is one caller's validated reads.
type readJob struct {
	addrs []domain.Address
	out   []ports.ReadResult
}

// readStorage reads addrs from storage: at once, or, with natural batching
// (Config.Batch), together with the reads of the callers that wait while
// another read is at storage.
func (s *Service) readStorage(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	shard := -1
	if s.reads != nil {
		shard = s.shardOf(len(addrs), func(k int) (string, domain.RecordID) { return addrs[k].Store, addrs[k].ID() })
	}
	if shard < 0 {
		return s.storageRead(ctx, addrs)
	}
	j := &readJob{addrs: addrs}
	if err := s.reads[shard].do(ctx, j); err != nil {
		// It left the queue, or the batch carrying it (reads may: a
		// read's outcome changes nothing).
		msg := "stopped before the record was read"
		if errors.Is(err, errLeftBatch) {
			err, msg = ctx.Err(), "the request ended while the read was at storage in a batch shared with other requests"
		}
		out := make([]ports.ReadResult, len(addrs))
		for i := range out {
			out[i].Err = domain.Wrap(stoppedCode(err), err, "%s", msg)
		}
		return out
	}
	return j.out
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
