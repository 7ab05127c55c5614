package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/ports"
)

// deadLetterReason returns the reason reported to the observer for a dead
// letter: undecodable for records that are not Sink mutations, else the
// code of the mutation's final error.
func deadLetterReason(d *deadLetterInfo) ports.DeadLetterReason {
	if d.reason == ReasonUndecodable {
		return ports.DeadLetterReason{Undecodable: true}
	}
	return ports.DeadLetterReason{Code: d.code}
}

// PartitionsGone returns a kgo option set that withdraws the lag of
// partitions the worker no longer owns (revoked in a rebalance or lost).
func PartitionsGone(gone func(topic string, partition int32)) []kgo.Opt {
	f := func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		for t, ps := range m {
			for _, p := range ps {
				gone(t, p)
			}
		}
	}
	return []kgo.Opt{kgo.OnPartitionsRevoked(f), kgo.OnPartitionsLost(f)}
}
