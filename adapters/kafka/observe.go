package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReasonLabelUndecodable is the dead-letter reason reported to the observer
// for records that are not Sink mutations; other dead letters are reported
// with the domain.Code name of their final error.
const ReasonLabelUndecodable = "UNDECODABLE"

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
