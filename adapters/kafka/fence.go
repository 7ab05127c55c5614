package kafka

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fence tracks the partitions a consumer group member gives up (revoked in
// a rebalance, or lost when the group expelled it) so that a Subscriber
// never finishes work of a partition it no longer owns: the context of the
// poll in flight (every message's Context) is canceled when one of its
// partitions goes, and the finished prefix of such a partition is not
// committed (the new owner reads it again; the records' applied marks make
// that harmless).
//
// Create it before the client, add Opts to the client's options and pass
// it to the Subscriber (SubscriberConfig.Fence). With BlockRebalanceOnPoll
// (NewClient) the client calls these callbacks only between polls; the
// worker's time budget keeps a poll well below the rebalance timeout, so
// an expelled member learns it after its poll, and the marks reject what
// it wrote late.
type Fence struct {
	mu      sync.Mutex
	gen     map[topicPartition]uint64
	watches map[*fenceWatch]struct{}
	changed chan struct{} // closed and replaced by every Gone
}

type topicPartition struct {
	topic     string
	partition int32
}

type fenceWatch struct {
	parts  map[topicPartition]bool
	cancel context.CancelFunc
}

// NewFence returns a fence that no partition left yet.
func NewFence() *Fence {
	return &Fence{gen: map[topicPartition]uint64{}, watches: map[*fenceWatch]struct{}{}, changed: make(chan struct{})}
}

// Opts returns the client options (kgo.OnPartitionsRevoked and
// kgo.OnPartitionsLost) that feed the fence; also is called for every
// partition that goes too (for example to withdraw its lag metric). A
// client has one callback of each kind: do not combine them with other
// OnPartitionsRevoked / OnPartitionsLost options.
func (f *Fence) Opts(also func(topic string, partition int32)) []kgo.Opt {
	cb := func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
		f.Gone(m)
		if also != nil {
			for t, ps := range m {
				for _, p := range ps {
					also(t, p)
				}
			}
		}
	}
	return []kgo.Opt{kgo.OnPartitionsRevoked(cb), kgo.OnPartitionsLost(cb)}
}

// Gone records that the member no longer owns the partitions of m and
// cancels the polls in flight that hold records of them.
func (f *Fence) Gone(m map[string][]int32) {
	n := 0
	for _, ps := range m {
		n += len(ps)
	}
	if n == 0 {
		return // a cooperative member's session ended without revoking
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.changed)
	f.changed = make(chan struct{})
	for t, ps := range m {
		for _, p := range ps {
			k := topicPartition{t, p}
			f.gen[k]++
			for w := range f.watches {
				if w.parts[k] {
					w.cancel()
				}
			}
		}
	}
}

// next returns a channel closed by the next Gone.
func (f *Fence) next() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// generations returns the current generation of each partition.
func (f *Fence) generations(parts []topicPartition) map[topicPartition]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[topicPartition]uint64, len(parts))
	for _, k := range parts {
		out[k] = f.gen[k]
	}
	return out
}

// still reports which of the partitions of snap are still at their
// generation (owned since the snapshot).
func (f *Fence) still(snap map[topicPartition]uint64, k topicPartition) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := snap[k]
	return ok && f.gen[k] == g
}

// watch cancels cancel when one of parts goes; stop ends the watch.
func (f *Fence) watch(parts []topicPartition, cancel context.CancelFunc) (stop func()) {
	w := &fenceWatch{parts: make(map[topicPartition]bool, len(parts)), cancel: cancel}
	for _, k := range parts {
		w.parts[k] = true
	}
	f.mu.Lock()
	f.watches[w] = struct{}{}
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		delete(f.watches, w)
		f.mu.Unlock()
	}
}

// expelledCommit reports whether a commit error says that the group
// expelled this member (it will learn so and give up its partitions).
func expelledCommit(err error) bool {
	return errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.UnknownMemberID) ||
		errors.Is(err, kerr.FencedInstanceID) || errors.Is(err, kerr.FencedMemberEpoch)
}

// fencedCommit reports whether a commit error says that the group moved
// on without this member (its generation or membership is gone): retrying
// the commit cannot help, the partitions' new owners read the records
// again.
func fencedCommit(err error) bool {
	return errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.UnknownMemberID) ||
		errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.FencedInstanceID) ||
		errors.Is(err, kerr.FencedMemberEpoch) || errors.Is(err, kerr.StaleMemberEpoch)
}

// encodeTopicID renders a Kafka topic id as Kafka's tools do (URL-safe
// base64 without padding); the zero id is "".
func encodeTopicID(id [16]byte) string {
	if id == [16]byte{} {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(id[:])
}

// topicID asks the brokers for the id of topic ("" when they have none).
func topicID(ctx context.Context, cl *kgo.Client, topic string) (string, error) {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return "", err
	}
	for _, rt := range resp.Topics {
		if rt.Topic != nil && *rt.Topic == topic {
			if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
				return "", err
			}
			return encodeTopicID(rt.TopicID), nil
		}
	}
	return "", nil
}

// ErrFenced is CheckFence's error when the member does not (or may no
// longer) own its partitions: it must have no more side effects for them.
var ErrFenced = errors.New("this worker no longer owns its partitions of the mutation log")

// CheckFence asks the group coordinator whether this member still owns
// its partitions before a side effect that the records' applied marks do
// not fence (a dead letter): it heartbeats with the member's id and
// generation, which the coordinator accepts only from a current member of
// a stable group. A member that was frozen past its session timeout and
// woke up in the middle of a batch learns here, before it writes, that
// its partitions went to another member, even when its client has not
// noticed yet. It returns nil, or ErrFenced wrapping the coordinator's
// answer (a rebalance in progress counts: the partitions may be moving),
// or another error when the coordinator cannot be asked (treat it like
// ErrFenced: the side effect waits).
func (s *Subscriber) CheckFence(ctx context.Context) error {
	group, _ := s.client.OptValue(kgo.ConsumerGroup).(string)
	if group == "" {
		return nil // not a group member: nobody else reads its partitions
	}
	member, gen := s.client.GroupMetadata()
	if member == "" || gen < 0 {
		return fmt.Errorf("%w: it has no current membership of group %q", ErrFenced, group)
	}
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = group, member, gen
	if id, _ := s.client.OptValue(kgo.InstanceID).(string); id != "" {
		req.InstanceID = &id
	}
	resp, err := req.RequestWith(ctx, s.client)
	if err != nil {
		return fmt.Errorf("cannot ask the group coordinator whether this worker still owns its partitions: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return fmt.Errorf("%w: the group coordinator answered %w", ErrFenced, err)
	}
	return nil
}
