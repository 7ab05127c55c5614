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
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sink-io/sink/internal/ctxtime"
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
	// MetadataBatchAfter, when set, is the MetadataBatch of the poll that
	// was still in flight when this one was emitted (see
	// SubscriberConfig.PipelineWindow): a handler must finish that poll
	// first, and hold back this poll's mutations of the records it parked
	// and of the partitions it left unfinished (Worker does).
	MetadataBatchAfter = "_sink_kafka_batch_after"
	// MetadataLog is the identity of the log the record was read from:
	// SubscriberConfig.LogEpoch when set, otherwise the topic's id (empty
	// when the brokers have none). It is the Log of the mutation's
	// domain.SourcePosition, which the records' applied marks compare.
	MetadataLog = "_sink_kafka_log"
)

// isSubscriberMetadata reports whether k is one of the Metadata* entries
// the Subscriber sets (a record's headers must not supply them: a dead
// letter drops them, and emit overwrites or removes them).
func isSubscriberMetadata(k string) bool {
	switch k {
	case MetadataPartition, MetadataOffset, MetadataBatch, MetadataBatchIndex, MetadataBatchSize, MetadataBatchAfter, MetadataLog:
		return true
	}
	return false
}

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Topic is the topic the client consumes (Subscribe accepts only it).
	Topic string
	// MaxPollRecords is the largest number of records emitted per poll
	// (default 500).
	MaxPollRecords int
	// CommitTimeout bounds the offset commit after a poll, retries
	// included (default 10 s). A commit that still fails is counted
	// (SubscriberStats.CommitFailures) and reported by Health until a later
	// commit succeeds; its records are read again by the partition's next
	// reader (the applied marks skip them).
	CommitTimeout time.Duration
	// LogEpoch, when set, is the log identity of every message
	// (MetadataLog) instead of the topic's id. Set it to pin the identity,
	// for example when the brokers do not report topic ids. With the topic
	// id (the default) a re-created topic gets a new identity, so that the
	// positions of the old topic do not fence the mutations of the new one;
	// a pinned epoch must be changed by hand when the topic is re-created.
	LogEpoch string
	// MaxParked bounds the records held parked (see markParked): with
	// that many, no new records are polled until some are resolved
	// (default 10 × MaxPollRecords).
	MaxParked int
	// Fence, when set, is fed by the client's rebalance callbacks (see
	// Fence): the poll in flight is canceled and not committed for
	// partitions that went. Default: a fence nobody feeds.
	Fence *Fence
	// RedeliveryDelay is the pause before a partition with a nacked
	// message is read again from that message (default 1 s).
	RedeliveryDelay time.Duration
	// PipelineWindow is how long the subscriber may keep rebalances waiting
	// while it pipelines: it emits the next poll while the handler is still
	// finishing the previous one (tagged MetadataBatchAfter), so that
	// polling and delivering overlap applying. It pipelines only while no
	// records are parked and no commit is pending, and lets rebalances
	// through (with nothing in flight) at least once per window, so a
	// rebalance waits at most about the window plus two polls' handling
	// (keep that below the group's rebalance timeout, as BatchTimeout).
	// Default DefaultPipelineWindow; negative: never pipeline.
	PipelineWindow time.Duration
	// CloseTimeout bounds how long Close waits for the messages in flight
	// to be acked or nacked; the rest count as nacked (default 30 s).
	CloseTimeout time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Observer receives the lag of each polled partition (default
	// ports.NopObserver).
	Observer ports.LagObserver
}

// SubscriberStats are counters of a Subscriber since it was created.
type SubscriberStats struct {
	Polls          int64 // polls that returned records
	Records        int64 // records emitted
	Commits        int64 // successful offset commits
	CommitFailures int64 // offset commits that failed after their retries
	CommitRetries  int64 // attempts of offset commits that failed and were retried
	Fenced         int64 // batches with records of partitions the member lost meanwhile (not committed)
	Parked         int64 // records parked (each time)
	ParkedNow      int64 // records parked at the moment (approximate, read without locking)
	Pipelined      int64 // polls emitted while the previous one was still in flight
}

// Subscriber is a Watermill message.Subscriber over a franz-go consumer
// group member (a client created by NewClient with GroupID and Topic) that
// keeps a whole poll in flight. One loop:
//
//  1. take the parked records that are due again (see markParked), and,
//     unless MaxParked records are parked, poll up to MaxPollRecords
//     records (rebalances stay blocked, see NewClient); a polled record of
//     a record key with parked records joins them (offset order);
//  2. emit every record as a message (Unmarshal) in order, with the
//     Metadata* entries (partition, offset, poll id, position, poll size,
//     log identity) and a context that ends when one of the poll's
//     partitions is revoked or lost (Fence);
//  3. wait until every emitted message is acked or nacked (they may be
//     handled concurrently and finish in any order);
//  4. park the records nacked as parked (their record's queue is emitted
//     again after RedeliveryDelay, doubling up to 16 times that);
//  5. commit, per partition still owned, the offset after the longest
//     prefix of finished records: never past a parked or unfinished record
//     (retried within CommitTimeout, then with the next commit; see
//     Health);
//  6. rewind every partition with a nacked (not parked) record to its
//     first nacked offset (it and everything after it are emitted again,
//     in order, after RedeliveryDelay);
//  7. allow rebalances and poll again.
//
// Pipelining (SubscriberConfig.PipelineWindow): while a poll is in flight
// (steps 3–6) and nothing is parked, the subscriber polls again and emits
// what it gets as the next poll, tagged MetadataBatchAfter, so that the
// handler gets it while it applies the one before. The handler applies the
// two in order and holds back the next poll's mutations that must wait for
// what the one before parked or left unfinished (Worker does); the
// subscriber then settles the next poll without the partitions the one
// before rewound. Rebalances stay blocked meanwhile, up to the window.
//
// Delivery is at least once (the records' applied marks make applying
// effectively once). Close stops polling and returns once the messages in
// flight are finished (or CloseTimeout passed) and committed; parked
// records stay uncommitted for the next reader. The owner closes the
// client afterwards, which leaves the group.
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
	killCtx    context.Context
	killCancel context.CancelFunc // with kill
	done       chan struct{}      // closed when the loop ended

	polls          atomic.Int64
	records        atomic.Int64
	commits        atomic.Int64
	commitFailures atomic.Int64
	commitRetries  atomic.Int64
	fenced         atomic.Int64
	pipelined      atomic.Int64
	commitErr      atomic.Pointer[error] // the last commit's error, nil after a success

	logID       string         // topic id (resolved lazily) or LogEpoch
	pending     *pendingCommit // a failed commit to retry (run goroutine only)
	parking     *parking       // parked records (run goroutine only)
	readTo      map[topicPartition]readMark
	parkedTotal atomic.Int64
	parkedNow   atomic.Int64
	expelled    bool // the last commit showed that the group expelled this member
}

// NewSubscriber returns a subscriber reading with client.
func NewSubscriber(client *kgo.Client, cfg SubscriberConfig) (*Subscriber, error) {
	switch {
	case client == nil:
		return nil, errors.New("cannot create the mutation subscriber: no Kafka client")
	case cfg.Topic == "":
		return nil, errors.New("cannot create the mutation subscriber: no topic")
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cannot create the mutation subscriber: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Observer == nil {
		cfg.Observer = ports.NopObserver{}
	}
	if cfg.Fence == nil {
		cfg.Fence = NewFence()
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	killCtx, killCancel := context.WithCancel(context.Background())
	return &Subscriber{
		killCtx: killCtx, killCancel: killCancel,
		client: client, cfg: cfg, prefix: hex.EncodeToString(id[:]), logID: cfg.LogEpoch,
		parking: newParking(), readTo: map[topicPartition]readMark{},
		log:     cfg.Logger.With("component", "worker", "topic", cfg.Topic),
		closing: make(chan struct{}), kill: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// Stats returns the subscriber's counters.
func (s *Subscriber) Stats() SubscriberStats {
	return SubscriberStats{Polls: s.polls.Load(), Records: s.records.Load(), Commits: s.commits.Load(),
		CommitFailures: s.commitFailures.Load(), CommitRetries: s.commitRetries.Load(), Fenced: s.fenced.Load(),
		Parked: s.parkedTotal.Load(), ParkedNow: s.parkedNow.Load(), Pipelined: s.pipelined.Load()}
}

// Health returns the error of the last offset commit when it failed (nil
// once a later commit succeeded).
func (s *Subscriber) Health() error {
	if p := s.commitErr.Load(); p != nil {
		return fmt.Errorf("cannot commit the worker's offsets: %w", *p)
	}
	return nil
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
	t := time.AfterFunc(s.cfg.CloseTimeout, func() {
		close(s.kill)
		s.killCancel()
	})
	defer t.Stop()
	<-s.done
	s.killCancel()
	return nil
}

func (s *Subscriber) run(ctx context.Context, out chan<- *message.Message) {
	var backoff time.Duration
	var cur *inflight // the poll in flight
	var seq int64     // polls emitted
	var expelledGone <-chan struct{}
	allowed := time.Now()
	for {
		if cur == nil {
			var stop bool
			cur, stop = s.next(ctx, &backoff, &seq, out)
			if stop {
				return
			}
			if cur == nil {
				continue
			}
		}
		var ahead *inflight
		if s.mayPipeline(ctx, allowed, cur) {
			ahead = s.pollAhead(ctx, cur, &seq, out)
		}
		rewind, dropped, gone := s.finish(cur)
		if s.expelled && expelledGone == nil {
			expelledGone = gone
		}
		if len(rewind) > 0 && ctx.Err() == nil {
			s.client.SetOffsets(rewind)
			s.log.Warn("mutations were not finished; reading them again", "partitions", len(rewind[s.cfg.Topic]))
			ctxtime.Sleep(ctx, s.cfg.RedeliveryDelay)
		}
		if ahead != nil {
			// The poll emitted ahead is settled next. Its records of the
			// partitions this settle rewound or gave up are not its own:
			// they are read again from the rewind (the handler held them
			// back), or belong to the partition's new owner.
			ahead.ignore = dropped
			s.noteRead(ahead.recs, dropped)
			cur = ahead
			continue
		}
		cur = nil
		s.client.AllowRebalance()
		allowed = time.Now()
		if s.expelled {
			// The group expelled this member during the batch: let the
			// client give up the partitions (Fence) before polling, so that
			// records it fetched for them are not applied here (bounded:
			// the applied marks would skip them anyway).
			t := time.NewTimer(expelledWait)
			select {
			case <-expelledGone:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			s.expelled, expelledGone = false, nil
		}
		if ctx.Err() != nil {
			if len(rewind) > 0 || s.parking.n > 0 {
				s.log.Info("stopping: unfinished mutations stay uncommitted for the next owner", "parked", s.parking.n)
			}
			return
		}
	}
}

// inflight is an emitted poll until it is settled.
type inflight struct {
	id    string
	recs  []*kgo.Record // emitted, in order
	snap  map[topicPartition]uint64
	sched map[parkKey]*parkQueue
	// ignore: partitions whose records are not this poll's to settle
	// (see run); set before the poll is finished.
	ignore map[topicPartition]bool

	done          chan struct{} // closed when every message is acked or nacked
	acked, parked []bool        // set before done is closed
	release       func()        // ends the poll's context and its watches
}

// next prepares the next poll when none is in flight: it takes the parked
// records that are due and, unless MaxParked records are parked, polls new
// ones (diverting those of parked records), and emits them. It returns nil
// when there is nothing to emit (the caller loops), and stop when polling
// must end.
func (s *Subscriber) next(ctx context.Context, backoff *time.Duration, seq *int64, out chan<- *message.Message) (cur *inflight, stop bool) {
	for tp := range s.parking.dropGone(s.cfg.Fence) {
		delete(s.readTo, tp)
	}
	full := s.parking.n >= s.cfg.MaxParked
	// A batch holds at most MaxPollRecords records, due ones first.
	due, sched := s.parking.takeDue(time.Now(), s.cfg.MaxPollRecords)
	// The gauge follows every change of parking.n (dropGone, takeDue
	// here; divert and settle below), so Stats is right whenever read.
	s.parkedNow.Store(int64(s.parking.n))
	var recs []*kgo.Record
	var fetched kgo.Fetches
	if !full && len(due) < s.cfg.MaxPollRecords {
		var fetchErr bool
		recs, fetched, fetchErr, stop = s.poll(ctx, len(due) > 0, s.cfg.MaxPollRecords-len(due))
		if stop {
			s.client.AllowRebalance()
			return nil, true
		}
		if len(recs) == 0 && len(due) == 0 {
			if s.pending != nil {
				s.commitOffsets(nil, nil)
			}
			s.client.AllowRebalance()
			if fetchErr {
				*backoff = min(max(2**backoff, 50*time.Millisecond), 2*time.Second)
				if !ctxtime.Sleep(ctx, *backoff) {
					return nil, true
				}
			}
			return nil, false
		}
	} else if len(due) == 0 {
		// Backpressure: too many parked records (MaxParked); no new
		// ones until some are resolved.
		s.client.AllowRebalance()
		wctx, cancel := s.parking.waitCtx(ctx, time.Now(), commitRetryInterval)
		<-wctx.Done()
		cancel()
		return nil, ctx.Err() != nil
	}
	*backoff = 0
	s.noteRead(recs, nil)
	fresh := s.parking.divert(recs)
	s.parkedNow.Store(int64(s.parking.n))
	emitted := append(due, fresh...)
	if len(emitted) == 0 {
		// Every polled record joined a parked record's queue.
		s.client.AllowRebalance()
		return nil, false
	}
	return s.start(ctx, emitted, fetched, sched, "", seq, out), false
}

// mayPipeline reports whether the next poll may be emitted while cur is
// finished (see SubscriberConfig.PipelineWindow): not when records are
// parked or cur redelivers parked ones (their records' later records are
// diverted at poll time, and MaxParked holds polling back), a commit is
// pending, the group expelled this member, polling ends, or rebalances
// have waited for the window.
func (s *Subscriber) mayPipeline(ctx context.Context, allowed time.Time, cur *inflight) bool {
	return s.cfg.PipelineWindow > 0 && ctx.Err() == nil && s.parking.n == 0 && len(cur.sched) == 0 && s.pending == nil && !s.expelled &&
		time.Since(allowed) < s.cfg.PipelineWindow
}

// pollAhead polls while cur is in flight (until it is finished) and emits
// what it got as a poll to be handled after cur (MetadataBatchAfter); nil
// when nothing came. Rebalances stay blocked meanwhile (the records are
// those of the partitions cur holds or the member owns).
func (s *Subscriber) pollAhead(ctx context.Context, cur *inflight, seq *int64, out chan<- *message.Message) *inflight {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-cur.done:
		case <-pctx.Done():
		}
		cancel()
	}()
	recs, fetched, _, _ := s.fetch(pctx, s.cfg.MaxPollRecords)
	if len(recs) == 0 {
		return nil
	}
	s.pipelined.Add(1)
	return s.start(ctx, recs, fetched, nil, cur.id, seq, out)
}

// start emits recs as one poll (after: see MetadataBatchAfter) with a
// context that ends when one of its partitions goes (Fence) or Close gives
// up waiting, and waits for its acks in the background.
func (s *Subscriber) start(ctx context.Context, recs []*kgo.Record, fetched kgo.Fetches, sched map[parkKey]*parkQueue, after string, seq *int64, out chan<- *message.Message) *inflight {
	parts := partitionsOf(recs)
	b := &inflight{id: s.prefix + "-" + strconv.FormatInt(*seq, 10), recs: recs, sched: sched,
		snap: s.cfg.Fence.generations(parts), done: make(chan struct{})}
	*seq++
	batchCtx, cancelBatch := context.WithCancel(context.Background())
	unwatch := s.cfg.Fence.watch(parts, cancelBatch)
	stopKill := context.AfterFunc(s.killCtx, cancelBatch)
	b.release = func() {
		unwatch()
		stopKill()
		cancelBatch()
	}
	if fetched != nil {
		s.resolveLog(ctx, fetched)
	}
	msgs, flags := s.emit(batchCtx, recs, b.id, after, out)
	go func() {
		b.acked, b.parked = s.await(msgs, flags)
		close(b.done)
	}()
	return b
}

// finish waits until every message of b is acked or nacked and settles
// it. It returns the offsets to rewind to, the partitions whose records
// after b are not the next poll's own (rewound or given up; see run), and
// a channel closed by the next Gone of the Fence (for when the commit
// shows that the group expelled this member: s.expelled).
func (s *Subscriber) finish(b *inflight) (rewind map[string]map[int32]kgo.EpochOffset, dropped map[topicPartition]bool, gone <-chan struct{}) {
	<-b.done
	b.release()
	gone = s.cfg.Fence.next()
	rewind, dropped = s.settle(b)
	return rewind, dropped, gone
}

// noteRead advances, per partition, the highest offset read.
// Records of the partitions in skip are not noted.
func (s *Subscriber) noteRead(recs []*kgo.Record, skip map[topicPartition]bool) {
	if len(recs) == 0 {
		return
	}
	gens := s.cfg.Fence.generations(partitionsOf(recs))
	for _, r := range recs {
		k := topicPartition{r.Topic, r.Partition}
		if skip[k] {
			continue
		}
		cur, ok := s.readTo[k]
		if !ok || cur.gen != gens[k] || r.Offset > cur.offset {
			s.readTo[k] = readMark{offset: r.Offset, gen: gens[k]}
		}
	}
}

// readMark is the highest offset read from a partition while it had
// Fence generation gen.
type readMark struct {
	offset int64
	gen    uint64
}

// poll returns the next records. stop reports that polling must end.
// With due parked records it only takes what is buffered or comes at
// once; otherwise it waits until records come, the next parked record is
// due, or (after a failed commit) commitRetryInterval passed.
func (s *Subscriber) poll(ctx context.Context, haveDue bool, maxRecords int) (recs []*kgo.Record, fetched kgo.Fetches, fetchErr, stop bool) {
	var limit time.Duration
	switch {
	case haveDue:
		limit = 10 * time.Millisecond
	case s.pending != nil:
		limit = commitRetryInterval
	}
	pctx, cancel := s.parking.waitCtx(ctx, time.Now(), limit)
	defer cancel()
	recs, fetched, fetchErr, closed := s.fetch(pctx, maxRecords)
	if closed {
		s.log.Error("the Kafka client was closed while consuming")
		return nil, nil, false, true
	}
	if ctx.Err() != nil && len(recs) == 0 {
		return nil, nil, false, true
	}
	return recs, fetched, fetchErr, false
}

// fetch polls up to maxRecords records until ctx ends, reports fetch
// errors and the partitions' lag, and counts the poll. closed reports a
// closed client.
func (s *Subscriber) fetch(ctx context.Context, maxRecords int) (recs []*kgo.Record, fetched kgo.Fetches, fetchErr, closed bool) {
	fetches := s.client.PollRecords(ctx, maxRecords)
	if fetches.IsClientClosed() {
		return nil, nil, false, true
	}
	fetches.EachError(func(_ string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
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
	return recs, fetches, fetchErr, false
}

// emit sends every record as a message, in order, and returns the
// messages sent (all of them unless Close gave up waiting) and their park
// signals (see markParked).
func (s *Subscriber) emit(ctx context.Context, recs []*kgo.Record, batch, after string, out chan<- *message.Message) ([]*message.Message, []*atomic.Bool) {
	size := strconv.Itoa(len(recs))
	msgs := make([]*message.Message, 0, len(recs))
	flags := make([]*atomic.Bool, 0, len(recs))
	for i, rec := range recs {
		msg := unmarshal(rec, 6)
		md := msg.Metadata
		md[MetadataPartition] = strconv.FormatInt(int64(rec.Partition), 10)
		md[MetadataOffset] = strconv.FormatInt(rec.Offset, 10)
		md[MetadataBatch] = batch
		md[MetadataBatchIndex] = strconv.Itoa(i)
		md[MetadataBatchSize] = size
		// A record's own headers (a replayed dead letter, another
		// producer) never stand for these.
		delete(md, MetadataBatchAfter)
		delete(md, MetadataLog)
		if after != "" {
			md[MetadataBatchAfter] = after
		}
		if s.logID != "" {
			md[MetadataLog] = s.logID
		}
		// The poll's context, with the record (RecordFromMessage) and the
		// park signal.
		flag := new(atomic.Bool)
		msg.SetContext(context.WithValue(context.WithValue(ctx, recordCtxKey{}, rec), parkSignalKey{}, flag))
		select {
		case out <- msg:
			msgs = append(msgs, msg)
			flags = append(flags, flag)
		case <-s.kill:
			return msgs, flags
		}
	}
	return msgs, flags
}

// await waits for every message to be acked or nacked and reports which
// were acked and which were nacked as parked (by record position; unsent
// records count as nacked).
func (s *Subscriber) await(msgs []*message.Message, flags []*atomic.Bool) (acked, parked []bool) {
	acked = make([]bool, len(msgs))
	parked = make([]bool, len(msgs))
	for i, msg := range msgs {
		select {
		case <-msg.Acked():
			acked[i] = true
		case <-msg.Nacked():
			parked[i] = flags[i].Load()
		case <-s.kill:
			// Acked or nacked in the meantime still counts.
			select {
			case <-msg.Acked():
				acked[i] = true
			default:
			}
		}
	}
	return acked, parked
}

// settle parks the parked records of b, commits per partition the offset
// before its first unfinished or parked record (everything before it is
// finished), and returns the offsets to rewind to: per partition with an
// unfinished (not parked) record, its first unfinished offset. Partitions
// revoked or lost while the batch was in flight are left to their new
// owners: neither committed nor rewound. The partitions of b.ignore are
// left alone. dropped are the partitions rewound or left to new owners.
func (s *Subscriber) settle(b *inflight) (rewind map[string]map[int32]kgo.EpochOffset, dropped map[topicPartition]bool) {
	type tp = topicPartition
	recs, acked, parked, snap, sched := b.recs, b.acked, b.parked, b.snap, b.sched
	stopAt := map[tp]int64{}
	for i, rec := range recs {
		k := tp{rec.Topic, rec.Partition}
		if b.ignore[k] || i < len(acked) && (acked[i] || parked[i]) {
			continue
		}
		if at, ok := stopAt[k]; !ok || rec.Offset < at {
			stopAt[k] = rec.Offset
		}
	}
	gone := map[tp]bool{}
	for k := range snap {
		if !b.ignore[k] && !s.cfg.Fence.still(snap, k) {
			gone[k] = true
		}
	}
	now := time.Now()
	maxDelay := 16 * s.cfg.RedeliveryDelay
	for i, rec := range recs {
		k := tp{rec.Topic, rec.Partition}
		if i >= len(parked) || !parked[i] || gone[k] || b.ignore[k] {
			continue
		}
		if at, ok := stopAt[k]; ok && rec.Offset >= at {
			continue // read again with the rewind
		}
		delay := s.cfg.RedeliveryDelay
		q := sched[keyOf(rec)]
		if q != nil {
			delay = min(2*q.delay, maxDelay)
		}
		s.parking.add(rec, map[tp]uint64{k: snap[k]}, delay, now, q != nil)
		s.parkedTotal.Add(1)
	}
	for k, at := range stopAt {
		if gone[k] {
			continue
		}
		s.parking.dropFrom(k, at)
		if m, ok := s.readTo[k]; ok && m.offset >= at {
			s.readTo[k] = readMark{offset: at - 1, gen: m.gen}
		}
	}
	low := s.parking.lowest()
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for k := range snap {
		if gone[k] || b.ignore[k] {
			continue
		}
		m, ok := s.readTo[k]
		if !ok || m.gen != snap[k] {
			continue
		}
		to := m.offset + 1
		if at, ok := stopAt[k]; ok && at < to {
			to = at
		}
		if at, ok := low[k]; ok && at < to {
			to = at
		}
		if offsets[k.topic] == nil {
			offsets[k.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[k.topic][k.partition] = kgo.EpochOffset{Epoch: -1, Offset: to}
	}
	s.parkedNow.Store(int64(s.parking.n))
	if len(offsets) > 0 {
		s.commitOffsets(offsets, snap)
	}
	if len(gone) > 0 {
		s.fenced.Add(1)
	}
	for k := range gone {
		delete(stopAt, k)
		delete(s.readTo, k)
	}
	dropped = gone
	if len(stopAt) == 0 {
		return nil, dropped
	}
	rewind = map[string]map[int32]kgo.EpochOffset{}
	for k, at := range stopAt {
		if rewind[k.topic] == nil {
			rewind[k.topic] = map[int32]kgo.EpochOffset{}
		}
		rewind[k.topic][k.partition] = kgo.EpochOffset{Epoch: -1, Offset: at}
		dropped[k] = true
	}
	return rewind, dropped
}

// commitOffsets commits the offsets (the next offset to read, per
// partition), retrying failures with backoff within CommitTimeout. An
// error that says the group moved on without this member is not retried.
//
// A commit that still fails is kept and retried with the next commit, or
// after commitRetryInterval without records, for the partitions the
// member still owns; Health reports it meanwhile.
func (s *Subscriber) commitOffsets(offsets map[string]map[int32]kgo.EpochOffset, snap map[topicPartition]uint64) {
	if offsets == nil {
		offsets = map[string]map[int32]kgo.EpochOffset{}
	}
	if snap == nil {
		snap = map[topicPartition]uint64{}
	}
	if p := s.pending; p != nil {
		s.pending = nil
		for t, ps := range p.offsets {
			for part, eo := range ps {
				k := topicPartition{t, part}
				if !s.cfg.Fence.still(p.snap, k) {
					continue
				}
				if _, ok := offsets[t][part]; ok {
					continue // the newer commit of the partition wins
				}
				if offsets[t] == nil {
					offsets[t] = map[int32]kgo.EpochOffset{}
				}
				offsets[t][part] = eo
				snap[k] = p.snap[k]
			}
		}
	}
	if len(offsets) == 0 {
		s.commitErr.Store(nil)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CommitTimeout)
	defer cancel()
	backoff := 50 * time.Millisecond
	for {
		err := s.commitOnce(ctx, offsets)
		if err == nil {
			s.commits.Add(1)
			s.commitErr.Store(nil)
			return
		}
		fenced := fencedCommit(err)
		if fenced || ctx.Err() != nil || !ctxtime.Sleep(ctx, backoff) {
			s.commitFailures.Add(1)
			if fenced {
				// The group moved on without this member: the partitions'
				// next readers read the batch again and the records'
				// applied marks skip what was applied already.
				s.expelled = s.expelled || expelledCommit(err)
				s.commitErr.Store(nil)
				s.log.Warn("cannot commit offsets: the group moved on without this worker; the partitions' next reader reads the batch again", "error", err)
				return
			}
			s.commitErr.Store(&err)
			s.pending = &pendingCommit{offsets: offsets, snap: snap}
			s.log.Warn("cannot commit offsets; retrying later", "error", err)
			return
		}
		s.commitRetries.Add(1)
		backoff = min(2*backoff, time.Second)
	}
}

// commitOnce commits offsets and returns the request's or the first
// partition's error.
func (s *Subscriber) commitOnce(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) error {
	var rerr error
	s.client.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			rerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && rerr == nil {
					rerr = err
				}
			}
		}
	})
	return rerr
}

// commitRetryInterval is how long a poll waits for records before a
// failed commit is retried.
const commitRetryInterval = 2 * time.Second

// expelledWait bounds the wait, after a commit showed that the group
// expelled this member, for the client to give up its partitions.
const expelledWait = 5 * time.Second

// pendingCommit is a commit that failed, kept to be retried.
type pendingCommit struct {
	offsets map[string]map[int32]kgo.EpochOffset
	snap    map[topicPartition]uint64
}

// resolveLog sets the log identity from the poll's topic id when no
// LogEpoch pins it (asking the brokers when the fetch did not carry it).
func (s *Subscriber) resolveLog(ctx context.Context, fetches kgo.Fetches) {
	if s.cfg.LogEpoch != "" {
		return
	}
	var fetchedID [16]byte
	fetches.EachTopic(func(t kgo.FetchTopic) {
		if t.Topic == s.cfg.Topic && len(t.Partitions) > 0 {
			fetchedID = t.TopicID
		}
	})
	if id := encodeTopicID(fetchedID); id != "" {
		if id != s.logID && s.logID != "" {
			s.log.Warn("the mutation log's topic id changed (re-created topic): positions of the old topic no longer fence", "topic_id", id)
		}
		s.logID = id
		return
	}
	if s.logID != "" {
		return
	}
	mctx, cancel := context.WithTimeout(ctx, s.cfg.CommitTimeout)
	defer cancel()
	id, err := topicID(mctx, s.client, s.cfg.Topic)
	if err != nil || id == "" {
		s.log.Warn("cannot learn the mutation log's topic id; set SINK_KAFKA_LOG_EPOCH so that log positions fence stale workers (mutation ids still dedupe)", "error", err)
		return
	}
	s.logID = id
}

// partitionsOf returns the distinct partitions of recs.
func partitionsOf(recs []*kgo.Record) []topicPartition {
	seen := map[topicPartition]bool{}
	var out []topicPartition
	for _, r := range recs {
		k := topicPartition{r.Topic, r.Partition}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
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
