package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReasonLabelUndecodable is the dead-letter reason reported to the observer
// for records that are not Sink mutations; other dead letters are reported
// with the domain.Code name of their final error.
const ReasonLabelUndecodable = "UNDECODABLE"

// observeLag reports, for every partition that returned records, how many
// records follow the last one polled (high watermark - next offset).
func (c *Consumer) observeLag(fetches kgo.Fetches) {
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 || p.HighWatermark < 0 {
			return
		}
		lag := p.HighWatermark - (p.Records[len(p.Records)-1].Offset + 1)
		if lag < 0 {
			lag = 0
		}
		c.cfg.Observer.WorkerLag(p.Topic, p.Partition, lag)
	})
}

// observeDeadLetters reports the acknowledged dead letters of a batch by
// reason (records in notDead were not acknowledged).
func (c *Consumer) observeDeadLetters(items []batchItem, notDead map[*kgo.Record]bool) {
	counts := map[string]int{}
	for _, it := range items {
		if it.dead == nil || notDead[it.rec] {
			continue
		}
		reason := it.dead.code
		if it.dead.reason == ReasonUndecodable {
			reason = ReasonLabelUndecodable
		}
		counts[reason]++
	}
	for reason, n := range counts {
		c.cfg.Observer.DeadLettered(reason, n)
	}
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
