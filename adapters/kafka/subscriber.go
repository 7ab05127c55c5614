package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/ports"
)

var _ message.Subscriber = (*Subscriber)(nil)

// Metadata that Subscriber adds to every message it emits. A handler that
// batches (Worker) uses them to put the messages of one poll back together
// in offset order, whatever order the Router's goroutines deliver them in.
// Dead-letter records do not keep them.
const (
	// MetadataPartition and MetadataOffset locate the record (decimal).
	MetadataPartition = "_sink_kafka_partition"
	MetadataOffset    = "_sink_kafka_offset"
	// MetadataBatch identifies one poll of one Subscriber (opaque).
	MetadataBatch = "_sink_kafka_batch"
	// MetadataBatchIndex is the position of the record in its poll (0 …
	// size-1; records of one partition are in offset order) and
	// MetadataBatchSize the number of records of the poll.
	MetadataBatchIndex = "_sink_kafka_batch_index"
	MetadataBatchSize  = "_sink_kafka_batch_size"
)

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Topic is the topic the client consumes (Subscribe accepts only it).
	Topic string
	// MaxPollRecords is the largest number of records emitted per poll
	// (default 500).
	MaxPollRecords int
	// CommitTimeout bounds one offset commit (default 10 s).
	CommitTimeout time.Duration
	// RedeliveryDelay is the pause before a partition with a nacked
	// message is read again from that message (default 1 s).
	RedeliveryDelay time.Duration
	// CloseTimeout bounds how long Close waits for the messages in flight
	// to be acked or nacked; the rest count as nacked (default 30 s).
	CloseTimeout time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Observer receives the lag of each polled partition (default
	// ports.NopObserver).
	Observer ports.Observer
}

// SubscriberStats are counters of a Subscriber since it was created.
type SubscriberStats struct {
	Polls   int64 // polls that returned records
	Records int64 // records emitted
	Commits int64 // successful offset commits
}

// Subscriber is a Watermill message.Subscriber over a franz-go consumer
// group member (a client created by NewClient with GroupID and Topic) that
// keeps a whole poll in flight. One loop:
//
//  1. poll up to MaxPollRecords records (rebalances stay blocked, see
//     NewClient);
//  2. emit every record as a message (Unmarshal) in poll order, with the
//     Metadata* entries (partition, offset, poll id, position, poll size);
//  3. wait until every emitted message is acked or nacked (they may be
//     handled concurrently and finish in any order);
//  4. commit, per partition, the offset after the longest prefix of acked
//     records;
//  5. rewind every partition with a nacked record to its first nacked
//     offset (it and everything after it are emitted again, in order, after
//     RedeliveryDelay);
//  6. allow rebalances and poll again.
//
// Delivery is at least once. Close stops polling and returns once the
// messages in flight are finished (or CloseTimeout passed) and committed;
// the owner closes the client afterwards, which leaves the group.
type Subscriber struct {
	client *kgo.Client
	cfg    SubscriberConfig
	log    *slog.Logger
	prefix string // makes poll ids unique across subscribers

	mu         sync.Mutex
	subscribed bool
	closed     bool
	closing    chan struct{} // closed by Close: stop polling
	kill       chan struct{} // closed after CloseTimeout: stop waiting
	done       chan struct{} // closed when the loop ended

	polls   atomic.Int64
	records atomic.Int64
	commits atomic.Int64
}

// NewSubscriber returns a subscriber reading with client.
func NewSubscriber(client *kgo.Client, cfg SubscriberConfig) (*Subscriber, error) {
	switch {
	case client == nil:
		return nil, errors.New("cannot create the mutation subscriber: no Kafka client")
	case cfg.Topic == "":
		return nil, errors.New("cannot create the mutation subscriber: no topic")
	}
	if cfg.MaxPollRecords <= 0 {
		cfg.MaxPollRecords = 500
	}
	if cfg.CommitTimeout <= 0 {
		cfg.CommitTimeout = 10 * time.Second
	}
	if cfg.RedeliveryDelay <= 0 {
		cfg.RedeliveryDelay = time.Second
	}
	if cfg.CloseTimeout <= 0 {
		cfg.CloseTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Observer == nil {
		cfg.Observer = ports.NopObserver{}
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return &Subscriber{
		client: client, cfg: cfg, prefix: hex.EncodeToString(id[:]),
		log:     cfg.Logger.With("component", "worker", "topic", cfg.Topic),
		closing: make(chan struct{}), kill: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// Stats returns the subscriber's counters.
func (s *Subscriber) Stats() SubscriberStats {
	return SubscriberStats{Polls: s.polls.Load(), Records: s.records.Load(), Commits: s.commits.Load()}
}

// Subscribe implements message.Subscriber. It accepts only the configured
// topic and only once (a consumer group member has one position per
// partition). Ending ctx stops polling like Close.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, errors.New("cannot subscribe: the mutation subscriber is closed")
	case topic != s.cfg.Topic:
		return nil, fmt.Errorf("cannot subscribe to topic %q: this subscriber's client consumes %q", topic, s.cfg.Topic)
	case s.subscribed:
		return nil, fmt.Errorf("cannot subscribe to topic %q twice", topic)
	}
	s.subscribed = true
	// A poll is emitted at once; the reader spawns its handlers meanwhile.
	out := make(chan *message.Message, s.cfg.MaxPollRecords)
	pollCtx, stop := context.WithCancel(context.Background())
	go func() {
		select {
		case <-ctx.Done():
		case <-s.closing:
		}
		stop()
	}()
	go func() {
		defer close(s.done)
		defer close(out)
		defer stop()
		s.run(pollCtx, out)
	}()
	return out, nil
}

// Close implements message.Subscriber: see Subscriber.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		subscribed := s.subscribed
		s.mu.Unlock()
		if subscribed {
			<-s.done
		}
		return nil
	}
	s.closed = true
	subscribed := s.subscribed
	close(s.closing)
	s.mu.Unlock()
	if !subscribed {
		return nil
	}
	t := time.AfterFunc(s.cfg.CloseTimeout, func() { close(s.kill) })
	defer t.Stop()
	<-s.done
	return nil
}

func (s *Subscriber) run(ctx context.Context, out chan<- *message.Message) {
	var backoff time.Duration
	for batch := int64(0); ; batch++ {
		recs, fetchErr, stop := s.poll(ctx)
		if stop {
			s.client.AllowRebalance()
			return
		}
		if len(recs) == 0 {
			s.client.AllowRebalance()
			if fetchErr {
				backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
				if !sleepCtx(ctx, backoff) {
					return
				}
			}
			continue
		}
		backoff = 0
		msgs := s.emit(recs, s.prefix+"-"+strconv.FormatInt(batch, 10), out)
		acked := s.await(msgs)
		rewind := s.commit(recs, acked)
		if len(rewind) > 0 && ctx.Err() == nil {
			s.client.SetOffsets(rewind)
			s.log.Warn("mutations were not finished; reading them again", "partitions", len(rewind[s.cfg.Topic]))
			sleepCtx(ctx, s.cfg.RedeliveryDelay)
		}
		s.client.AllowRebalance()
		if ctx.Err() != nil {
			if len(rewind) > 0 {
				s.log.Info("stopping: unfinished mutations stay uncommitted for the next owner")
			}
			return
		}
	}
}

// poll returns the next records. stop reports that polling must end.
func (s *Subscriber) poll(ctx context.Context) (recs []*kgo.Record, fetchErr, stop bool) {
	fetches := s.client.PollRecords(ctx, s.cfg.MaxPollRecords)
	if fetches.IsClientClosed() {
		s.log.Error("the Kafka client was closed while consuming")
		return nil, false, true
	}
	if ctx.Err() != nil && fetches.NumRecords() == 0 {
		return nil, false, true
	}
	fetches.EachError(func(_ string, p int32, err error) {
		if errors.Is(err, context.Canceled) {
			return
		}
		fetchErr = true
		s.log.Warn("cannot fetch from the mutation log", "partition", p, "error", err)
	})
	s.observeLag(fetches)
	recs = fetches.Records()
	if len(recs) > 0 {
		s.polls.Add(1)
		s.records.Add(int64(len(recs)))
	}
	return recs, fetchErr, false
}

// emit sends every record as a message, in poll order, and returns the
// messages sent (all of them unless Close gave up waiting).
func (s *Subscriber) emit(recs []*kgo.Record, batch string, out chan<- *message.Message) []*message.Message {
	size := strconv.Itoa(len(recs))
	msgs := make([]*message.Message, 0, len(recs))
	for i, rec := range recs {
		msg := unmarshal(rec, 5)
		md := msg.Metadata
		md[MetadataPartition] = strconv.FormatInt(int64(rec.Partition), 10)
		md[MetadataOffset] = strconv.FormatInt(rec.Offset, 10)
		md[MetadataBatch] = batch
		md[MetadataBatchIndex] = strconv.Itoa(i)
		md[MetadataBatchSize] = size
		select {
		case out <- msg:
			msgs = append(msgs, msg)
		case <-s.kill:
			return msgs
		}
	}
	return msgs
}

// await waits for every message to be acked or nacked and reports which
// were acked (by record position; unsent records count as nacked).
func (s *Subscriber) await(msgs []*message.Message) []bool {
	acked := make([]bool, len(msgs))
	for i, msg := range msgs {
		select {
		case <-msg.Acked():
			acked[i] = true
		case <-msg.Nacked():
		case <-s.kill:
			// Acked or nacked in the meantime still counts.
			select {
			case <-msg.Acked():
				acked[i] = true
			default:
			}
		}
	}
	return acked
}

// commit commits, per partition, through the last record of the longest
// acked prefix, and returns the offsets to rewind to: per partition with
// an unfinished record, its first unfinished offset.
func (s *Subscriber) commit(recs []*kgo.Record, acked []bool) map[string]map[int32]kgo.EpochOffset {
	type tp struct {
		topic     string
		partition int32
	}
	stopAt := map[tp]int64{}
	for i, rec := range recs {
		k := tp{rec.Topic, rec.Partition}
		if i < len(acked) && acked[i] {
			continue
		}
		if at, ok := stopAt[k]; !ok || rec.Offset < at {
			stopAt[k] = rec.Offset
		}
	}
	last := map[tp]*kgo.Record{}
	for _, rec := range recs {
		k := tp{rec.Topic, rec.Partition}
		if at, ok := stopAt[k]; ok && rec.Offset >= at {
			continue
		}
		if l, ok := last[k]; !ok || rec.Offset > l.Offset {
			last[k] = rec
		}
	}
	if len(last) > 0 {
		commit := make([]*kgo.Record, 0, len(last))
		for _, r := range last {
			commit = append(commit, r)
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CommitTimeout)
		err := s.client.CommitRecords(ctx, commit...)
		cancel()
		if err != nil {
			// Read again after a restart or rebalance: at-least-once
			// delivery turns this into duplicates, not loss.
			s.log.Warn("cannot commit offsets; the batch may be applied again", "error", err)
		} else {
			s.commits.Add(1)
		}
	}
	if len(stopAt) == 0 {
		return nil
	}
	rewind := map[string]map[int32]kgo.EpochOffset{}
	for k, at := range stopAt {
		if rewind[k.topic] == nil {
			rewind[k.topic] = map[int32]kgo.EpochOffset{}
		}
		rewind[k.topic][k.partition] = kgo.EpochOffset{Epoch: -1, Offset: at}
	}
	return rewind
}

// observeLag reports, for every partition that returned records, how many
// records follow the last one polled (high watermark - next offset).
func (s *Subscriber) observeLag(fetches kgo.Fetches) {
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 || p.HighWatermark < 0 {
			return
		}
		lag := max(p.HighWatermark-(p.Records[len(p.Records)-1].Offset+1), 0)
		s.cfg.Observer.WorkerLag(p.Topic, p.Partition, lag)
	})
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
