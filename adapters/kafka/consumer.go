package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// Topic is the mutation log (the client must consume it in a group).
	Topic string
	// DeadLetterTopic receives permanently failed and undecodable mutations.
	DeadLetterTopic string
	// MaxPollRecords is the largest batch handed to the handler (default 500).
	MaxPollRecords int
	// CommitTimeout bounds one offset commit (default 10 s).
	CommitTimeout time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock of dead-letter times (default time.Now).
	Now func() time.Time
	// Observer receives the lag of each polled partition and the number of
	// dead-lettered mutations by reason (default ports.NopObserver).
	Observer ports.Observer
}

// ConsumerStats are counters of a consumer since it was created.
type ConsumerStats struct {
	Batches      int64 // batches processed
	Records      int64 // records fetched
	Applied      int64 // mutations applied (outcome without error)
	DeadLettered int64 // records written to the dead-letter topic
	Commits      int64 // successful offset commits
}

// Consumer is the worker's batch consumer of the mutation log. It runs one
// loop:
//
//  1. poll up to MaxPollRecords records (rebalances stay blocked until the
//     batch is committed, see NewClient);
//  2. convert each record to a Watermill message and decode it into a
//     domain.Mutation (Source = partition/offset);
//  3. hand all decodable mutations to the handler at once, which applies
//     them in dependency waves, never reordering one record's mutations;
//  4. write the undecodable records and the permanently failed mutations to
//     the dead-letter topic with metadata headers, and wait for the
//     acknowledgements;
//  5. commit, per partition, the offset after the last record that finished
//     (applied or dead-lettered) with no unfinished record before it;
//  6. allow rebalances and poll again.
//
// A mutation whose outcome is CodeCanceled (shutdown) is neither committed
// nor dead-lettered, nor is anything after it in its partition: the next
// owner of the partition reads it again.
type Consumer struct {
	client  *kgo.Client
	pub     message.Publisher
	handler ports.MutationHandler
	cfg     ConsumerConfig
	log     *slog.Logger

	mu      sync.Mutex
	started bool
	stop    context.CancelFunc // ends polling
	cancel  context.CancelFunc // ends applying
	done    chan struct{}
	runErr  error

	running atomic.Bool
	stats   struct{ batches, records, applied, deadLettered, commits atomic.Int64 }
}

// NewConsumer returns a consumer reading with client (a group member
// created by NewClient with GroupID and Topic) and writing dead letters
// through pub.
func NewConsumer(client *kgo.Client, pub message.Publisher, handler ports.MutationHandler, cfg ConsumerConfig) (*Consumer, error) {
	switch {
	case client == nil:
		return nil, errors.New("cannot create the mutation consumer: no Kafka client")
	case pub == nil:
		return nil, errors.New("cannot create the mutation consumer: no dead-letter publisher")
	case handler == nil:
		return nil, errors.New("cannot create the mutation consumer: no mutation handler")
	case cfg.Topic == "":
		return nil, errors.New("cannot create the mutation consumer: no topic")
	case cfg.DeadLetterTopic == "" || cfg.DeadLetterTopic == cfg.Topic:
		return nil, fmt.Errorf("cannot create the mutation consumer: dead-letter topic %q must be set and differ from %q", cfg.DeadLetterTopic, cfg.Topic)
	}
	if cfg.MaxPollRecords <= 0 {
		cfg.MaxPollRecords = 500
	}
	if cfg.CommitTimeout <= 0 {
		cfg.CommitTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Observer == nil {
		cfg.Observer = ports.NopObserver{}
	}
	return &Consumer{client: client, pub: pub, handler: handler, cfg: cfg, log: cfg.Logger.With("component", "worker", "topic", cfg.Topic)}, nil
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats {
	return ConsumerStats{
		Batches: c.stats.batches.Load(), Records: c.stats.records.Load(), Applied: c.stats.applied.Load(),
		DeadLettered: c.stats.deadLettered.Load(), Commits: c.stats.commits.Load(),
	}
}

// Running reports whether the consume loop is running.
func (c *Consumer) Running() bool { return c.running.Load() }

// Start starts the consume loop in a goroutine.
func (c *Consumer) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("cannot start the mutation consumer twice")
	}
	c.started = true
	pollCtx, stop := context.WithCancel(context.Background())
	applyCtx, cancel := context.WithCancel(context.Background())
	c.stop, c.cancel, c.done = stop, cancel, make(chan struct{})
	c.running.Store(true)
	go func() {
		defer close(c.done)
		defer c.running.Store(false)
		err := c.run(pollCtx, applyCtx)
		c.mu.Lock()
		c.runErr = err
		c.mu.Unlock()
		if err != nil {
			c.log.Error("the mutation consumer stopped", "error", err)
		}
	}()
	c.log.Info("consuming the mutation log", "dead_letter_topic", c.cfg.DeadLetterTopic, "max_poll_records", c.cfg.MaxPollRecords)
	return nil
}

// Done is closed when the consume loop has ended.
func (c *Consumer) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// Stop ends polling, lets the current batch finish until ctx ends (then
// the handler is canceled), commits what finished, and returns once the loop
// has ended. The owner closes the client afterwards, which leaves the group.
func (c *Consumer) Stop(ctx context.Context) error {
	c.mu.Lock()
	if !c.started {
		c.mu.Unlock()
		return nil
	}
	stop, cancel, done := c.stop, c.cancel, c.done
	c.mu.Unlock()
	stop()
	select {
	case <-done:
	case <-ctx.Done():
		cancel()
		<-done
	}
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runErr
}

func (c *Consumer) run(pollCtx, applyCtx context.Context) error {
	var backoff time.Duration
	for {
		fetches := c.client.PollRecords(pollCtx, c.cfg.MaxPollRecords)
		if fetches.IsClientClosed() {
			return errors.New("the Kafka client was closed while consuming")
		}
		if pollCtx.Err() != nil && fetches.NumRecords() == 0 {
			c.client.AllowRebalance()
			return nil
		}
		var fetchErr error
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			fetchErr = err
			c.log.Warn("cannot fetch from the mutation log", "partition", p, "error", err)
		})
		c.observeLag(fetches)
		recs := fetches.Records()
		if len(recs) == 0 {
			c.client.AllowRebalance()
			if fetchErr != nil {
				backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
				if !sleepCtx(pollCtx, backoff) {
					return nil
				}
			}
			continue
		}
		backoff = 0
		stopped := c.processBatch(applyCtx, recs)
		c.client.AllowRebalance()
		if stopped {
			return nil
		}
	}
}

type batchItem struct {
	rec  *kgo.Record
	dead *deadLetterInfo // set when the record goes to the dead-letter topic
}

type partitionKey struct {
	topic     string
	partition int32
}

// processBatch applies one polled batch, dead-letters its failures and
// commits what finished. It reports whether the consumer must stop
// (outcomes were canceled because applyCtx ended).
func (c *Consumer) processBatch(applyCtx context.Context, recs []*kgo.Record) bool {
	c.stats.batches.Add(1)
	c.stats.records.Add(int64(len(recs)))
	items := make([]batchItem, len(recs))
	muts := make([]domain.Mutation, 0, len(recs))
	owners := make([]int, 0, len(recs))
	for i, rec := range recs {
		items[i].rec = rec
		msg := Unmarshal(rec)
		m, err := decodeRecord([]byte(msg.Metadata[KeyMetadata]), msg.Payload)
		if err != nil {
			c.log.Warn("undecodable mutation record: dead-lettering it", "partition", rec.Partition, "offset", rec.Offset, "error", err)
			items[i].dead = &deadLetterInfo{reason: ReasonUndecodable, code: domain.CodeInvalidArgument.String(), message: err.Error(), mutationID: msg.UUID}
			continue
		}
		m.Source = domain.SourcePosition{Partition: rec.Partition, Offset: rec.Offset}
		muts = append(muts, m)
		owners = append(owners, i)
	}

	// stopAt[p] is the first offset of partition p that did not finish.
	stopAt := map[partitionKey]int64{}
	unfinished := func(rec *kgo.Record) {
		k := partitionKey{rec.Topic, rec.Partition}
		if at, ok := stopAt[k]; !ok || rec.Offset < at {
			stopAt[k] = rec.Offset
		}
	}
	if len(muts) > 0 {
		outcomes := c.handler.ApplyMutations(applyCtx, muts)
		for j, i := range owners {
			var o ports.ApplyOutcome
			if j < len(outcomes) {
				o = outcomes[j]
			} else {
				o = ports.ApplyOutcome{Err: domain.Errorf(domain.CodeCanceled, "the handler returned no outcome")}
			}
			if o.Err == nil {
				c.stats.applied.Add(1)
				continue
			}
			e := domain.AsError(o.Err)
			if e.Code == domain.CodeCanceled {
				unfinished(items[i].rec)
				continue
			}
			m := muts[j]
			c.log.Warn("mutation failed permanently: dead-lettering it", "mutation_id", m.ID, "address", m.Address.String(),
				"kind", m.Kind.String(), "partition", m.Source.Partition, "offset", m.Source.Offset,
				"code", e.Code.String(), "attempts", o.Attempts, "error", e.Message)
			items[i].dead = &deadLetterInfo{reason: ReasonApplyFailed, code: e.Code.String(), message: e.Error(), attempts: o.Attempts, mutationID: m.ID}
		}
	}

	// Dead letters of records before their partition's stop point must be
	// acknowledged before anything is committed.
	var dead []*kgo.Record
	var deadMsgs []*message.Message
	notDead := map[*kgo.Record]bool{}
	now := c.cfg.Now()
	for _, it := range items {
		if it.dead == nil {
			continue
		}
		if at, ok := stopAt[partitionKey{it.rec.Topic, it.rec.Partition}]; ok && it.rec.Offset > at {
			notDead[it.rec] = true
			continue // read again by the next owner
		}
		dead = append(dead, it.rec)
		deadMsgs = append(deadMsgs, newDeadLetterMessage(it.rec, *it.dead, now))
	}
	if len(deadMsgs) > 0 {
		for _, rec := range c.publishDeadLetters(applyCtx, dead, deadMsgs) {
			unfinished(rec)
			notDead[rec] = true
		}
		c.observeDeadLetters(items, notDead)
	}

	// Commit, per partition, through the last record before the stop point.
	last := map[partitionKey]*kgo.Record{}
	for _, rec := range recs {
		k := partitionKey{rec.Topic, rec.Partition}
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
		ctx, cancel := context.WithTimeout(context.WithoutCancel(applyCtx), c.cfg.CommitTimeout)
		err := c.client.CommitRecords(ctx, commit...)
		cancel()
		if err != nil {
			// The records are read again after a restart or rebalance:
			// at-least-once delivery turns this into duplicates, not loss.
			c.log.Warn("cannot commit offsets; the batch may be applied again", "error", err)
		} else {
			c.stats.commits.Add(1)
		}
	}
	if len(stopAt) == 0 {
		return false
	}
	if applyCtx.Err() != nil {
		c.log.Info("stopping: unfinished mutations stay uncommitted for the next owner", "partitions", len(stopAt))
		return true
	}
	// Unfinished without shutdown (a handler or dead-letter failure): fetch
	// those partitions again from the first unfinished offset.
	rewind := map[string]map[int32]kgo.EpochOffset{}
	for k, at := range stopAt {
		if rewind[k.topic] == nil {
			rewind[k.topic] = map[int32]kgo.EpochOffset{}
		}
		rewind[k.topic][k.partition] = kgo.EpochOffset{Epoch: -1, Offset: at}
	}
	c.client.SetOffsets(rewind)
	sleepCtx(applyCtx, time.Second)
	return false
}

// publishDeadLetters publishes the dead-letter messages, retrying the failed
// ones with backoff until all are acknowledged or ctx ends. It returns the
// records whose dead letter was not acknowledged.
func (c *Consumer) publishDeadLetters(ctx context.Context, recs []*kgo.Record, msgs []*message.Message) []*kgo.Record {
	backoff := 100 * time.Millisecond
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		for _, m := range msgs {
			m.SetContext(attemptCtx)
		}
		err := c.pub.Publish(c.cfg.DeadLetterTopic, msgs...)
		cancel()
		if err == nil {
			c.stats.deadLettered.Add(int64(len(msgs)))
			return nil
		}
		var pe *PublishError
		failedRecs, failedMsgs := recs, msgs
		if errors.As(err, &pe) {
			failedRecs, failedMsgs = nil, nil
			for _, f := range pe.Failed {
				failedRecs = append(failedRecs, recs[f.Index])
				failedMsgs = append(failedMsgs, msgs[f.Index])
			}
			c.stats.deadLettered.Add(int64(len(msgs) - len(failedMsgs)))
		}
		recs, msgs = failedRecs, failedMsgs
		c.log.Warn("cannot write to the dead-letter topic; retrying", "topic", c.cfg.DeadLetterTopic, "records", len(msgs), "error", err)
		if !sleepCtx(ctx, backoff) {
			return recs
		}
		backoff = min(2*backoff, 5*time.Second)
	}
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
