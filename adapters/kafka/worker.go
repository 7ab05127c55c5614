package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"go.opentelemetry.io/otel/trace"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/ctxtime"
	"github.com/sink-io/sink/ports"
)

// HandlerName is the name of the worker's Router handler.
const HandlerName = "sink-apply-mutations"

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Topic is the mutation log the worker subscribes to.
	Topic string
	// DeadLetterTopic receives permanently failed and undecodable mutations.
	DeadLetterTopic string
	// MaxBatch is the largest poll a batch may claim in its metadata
	// (default 10,000; at least the subscriber's MaxPollRecords); a message
	// claiming more is a batch of one.
	MaxBatch int
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock of dead-letter times (default time.Now).
	Now func() time.Time
	// Observer receives the number of dead-lettered mutations by reason
	// (default ports.NopObserver).
	Observer ports.DeadLetterObserver
	// BatchTimeout is the time budget of applying one batch (the deadline
	// of the handler's context; default DefaultBatchTimeout). Mutations
	// still failing transiently when it ends are parked: nacked without
	// being dead-lettered, their partition is read again from the first of
	// them after the subscriber's redelivery delay (later mutations of
	// other records in that partition are read again too, and skipped by
	// their records' applied marks). Keep it well below the consumer
	// group's rebalance timeout: NewClient's RebalanceTimeout / 3.
	BatchTimeout time.Duration
	// DeadLetterTimeout bounds writing one batch's dead letters, retries
	// included (default BatchTimeout / 2); what is not acknowledged by
	// then is nacked and read again.
	DeadLetterTimeout time.Duration
	// MaxAttempts is how many attempts, summed over the deliveries of a
	// parked mutation, it gets before it is dead-lettered as "retries
	// exhausted" (default DefaultMaxAttempts).
	MaxAttempts int
	// OnUnexpectedStop, when set, is called once (on its own goroutine)
	// when the router stops without Stop being called — the worker died
	// and the process should shut down.
	OnUnexpectedStop func(err error)
	// TracerProvider makes a consumer span per batch, continuing the
	// producers' traces (nil: no tracing; see tracing.go).
	TracerProvider trace.TracerProvider
}

// WorkerStats are counters of a worker since it was created.
type WorkerStats struct {
	Batches      int64 // batches applied
	Records      int64 // messages handled
	Applied      int64 // mutations applied (outcome without error, not skipped)
	Skipped      int64 // mutations found applied already (redeliveries), nothing written
	DeadLettered int64 // messages written to the dead-letter topic
	Parked       int64 // mutations parked: not applied within a batch's time budget, read again
	Commits      int64 // successful offset commits (Kafka subscriber only)
	// CommitFailures are offset commits that failed after their retries
	// (Kafka subscriber only).
	CommitFailures int64
	// HeldPolls are polls that were complete before the poll they follow
	// (MetadataBatchAfter) and waited for it to be applied.
	HeldPolls int64
	// Superseded counts the skipped mutations whose log position their
	// record's mark had passed (handled by some worker before).
	Superseded int64
	// Resolved counts failed mutations found applied (or handled by
	// another worker) when they were resolved before dead-lettering: they
	// were not dead-lettered (counted in Skipped too).
	Resolved int64
	// Withheld counts dead letters not written because the worker may have
	// lost the partition (see Worker.deadLetter); they are read again.
	Withheld int64
}

// Worker is the worker role: a Watermill message.Router with one handler
// (HandlerName) that applies the mutation log through a
// ports.MutationHandler, with the Recoverer, CorrelationID and a metrics
// middleware.
//
// The Router hands every message to its own goroutine, so the handler
// collects the messages of one Subscriber poll (MetadataBatch*) until all
// of them arrived, puts them back in poll order (which is offset order per
// partition) by their position, not by arrival, and applies them as one
// ApplyMutations call: the application's wave executor writes them in few
// storage calls and applies one record's mutations strictly in slice
// order. Polls are applied in the order the subscriber emitted them: one
// emitted while the one before was in flight (MetadataBatchAfter) waits
// for it, and its mutations of a record that poll parked, or of a
// partition it left unfinished, are held back (nacked; see holdBack).
// Each goroutine then returns its message's own result: nil (acked)
// when the mutation was applied or dead-lettered, an error (nacked, read
// again) otherwise. A message without batch metadata (another Pub/Sub,
// such as Watermill's GoChannel) is a batch of one, applied at once.
//
// Permanent failures and undecodable messages are written to
// DeadLetterTopic with the sink-dlq-* metadata before they are acked
// (within DeadLetterTimeout; otherwise nacked). A mutation whose outcome
// is CodeCanceled (shutdown) is nacked, and so is every failure after it
// in its partition (they are read again, not dead-lettered).
//
// Bounded and fenced: the handler's context ends after BatchTimeout (keep
// it well below the group's rebalance timeout), when the worker stops,
// and when the subscriber loses a partition of the batch (Fence). A
// mutation still failing transiently when the budget ends is parked: with
// the Kafka Subscriber it is held, with its record's later mutations,
// and delivered again later while the partition's other records flow (see
// markParked); with other subscribers it is nacked like a canceled one.
// Its attempts are summed over its deliveries; at MaxAttempts it is
// dead-lettered as "retries exhausted". Every mutation carries its log
// position (MetadataLog, partition, offset) for the records' applied
// marks, which reject what a stale worker writes late.
type Worker struct {
	sub     message.Subscriber
	pub     message.Publisher
	handler ports.MutationHandler
	cfg     WorkerConfig
	log     *slog.Logger
	router  *message.Router
	tracer  trace.Tracer // nil: no tracing

	applyCtx context.Context
	cancel   context.CancelFunc

	applyQ chan *pendingBatch // to the applier goroutine

	mu        sync.Mutex
	batches   map[string]*pendingBatch
	held      map[string]*pendingBatch // complete polls waiting for the poll they follow (by its id)
	abandoned bool
	started   bool
	stopping  bool
	done      chan struct{}
	runErr    error
	running   atomic.Bool

	stats struct {
		batches, records, applied, skipped, deadLettered, parked, held atomic.Int64
		superseded, resolved, withheld                                 atomic.Int64
	}

	// attempts sums the attempts of the parked mutation at the head of
	// each partition over its deliveries (applier goroutine only).
	attempts map[source]parkedAttempts
}

type parkedAttempts struct {
	id       string
	attempts int
}

// NewWorker returns a worker reading the mutation log from sub (a
// *Subscriber, or any Watermill subscriber) and writing dead letters
// through pub.
func NewWorker(sub message.Subscriber, pub message.Publisher, handler ports.MutationHandler, cfg WorkerConfig) (*Worker, error) {
	switch {
	case sub == nil:
		return nil, errors.New("cannot create the worker: no subscriber")
	case pub == nil:
		return nil, errors.New("cannot create the worker: no dead-letter publisher")
	case handler == nil:
		return nil, errors.New("cannot create the worker: no mutation handler")
	case cfg.Topic == "":
		return nil, errors.New("cannot create the worker: no topic")
	case cfg.DeadLetterTopic == "" || cfg.DeadLetterTopic == cfg.Topic:
		return nil, fmt.Errorf("cannot create the worker: dead-letter topic %q must be set and differ from %q", cfg.DeadLetterTopic, cfg.Topic)
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cannot create the worker: %w", err)
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
	w := &Worker{sub: sub, pub: pub, handler: handler, cfg: cfg, batches: map[string]*pendingBatch{}, held: map[string]*pendingBatch{}, attempts: map[source]parkedAttempts{},
		log: cfg.Logger.With("component", "worker", "topic", cfg.Topic), tracer: tracerOf(cfg.TracerProvider)}
	w.applyCtx, w.cancel = context.WithCancel(context.Background())
	w.applyQ = make(chan *pendingBatch)
	// The Router waits for running handlers as long as Stop allows (Stop
	// cancels them when its context ends).
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 24 * time.Hour}, routerLogger{cfg.Logger.With("component", "worker-router")})
	if err != nil {
		return nil, fmt.Errorf("cannot create the worker's router: %w", err)
	}
	router.AddMiddleware(middleware.Recoverer, middleware.CorrelationID, w.metrics)
	router.AddConsumerHandler(HandlerName, cfg.Topic, sub, w.Handle)
	w.router = router
	return w, nil
}

// Router returns the worker's Watermill router.
func (w *Worker) Router() *message.Router { return w.router }

// Stats returns the worker's counters.
func (w *Worker) Stats() WorkerStats {
	s := WorkerStats{Batches: w.stats.batches.Load(), Records: w.stats.records.Load(), Applied: w.stats.applied.Load(), Skipped: w.stats.skipped.Load(),
		DeadLettered: w.stats.deadLettered.Load(), Parked: w.stats.parked.Load(), HeldPolls: w.stats.held.Load(),
		Superseded: w.stats.superseded.Load(), Resolved: w.stats.resolved.Load(), Withheld: w.stats.withheld.Load()}
	if ks, ok := w.sub.(*Subscriber); ok {
		st := ks.Stats()
		s.Commits, s.CommitFailures = st.Commits, st.CommitFailures
	}
	return s
}

// Health reports why the worker is not healthy: its router does not run,
// or (Kafka subscriber) the last offset commit failed.
func (w *Worker) Health() error {
	if !w.Running() {
		return errors.New("the worker's router is not running")
	}
	if ks, ok := w.sub.(*Subscriber); ok {
		return ks.Health()
	}
	return nil
}

// Running reports whether the router runs.
func (w *Worker) Running() bool { return w.running.Load() }

// Start runs the router in a goroutine and returns once it is running.
func (w *Worker) Start() error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("cannot start the worker twice")
	}
	w.started = true
	w.done = make(chan struct{})
	w.running.Store(true)
	w.mu.Unlock()
	go w.applier()
	go func() {
		defer close(w.done)
		defer w.running.Store(false)
		defer close(w.applyQ) // no handler runs once Run returned
		err := w.router.Run(context.Background())
		w.mu.Lock()
		w.runErr = err
		unexpected := !w.stopping
		w.mu.Unlock()
		if err != nil {
			w.log.Error("the worker stopped", "error", err)
		}
		if unexpected && w.cfg.OnUnexpectedStop != nil {
			w.log.Error("the worker stopped unexpectedly")
			go w.cfg.OnUnexpectedStop(err)
		}
	}()
	select {
	case <-w.router.Running():
		w.log.Info("consuming the mutation log", "dead_letter_topic", w.cfg.DeadLetterTopic)
		return nil
	case <-w.done:
		return fmt.Errorf("cannot start the worker: %w", w.runErr)
	}
}

// Done is closed when the router has stopped.
func (w *Worker) Done() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}

// Stop closes the router: the subscriber stops reading, the batch in
// flight finishes until ctx ends (then it is canceled: its mutations are
// nacked and read again by the next owner), and what finished is
// committed. It returns once the router has stopped.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	started, done := w.started, w.done
	w.stopping = true
	w.mu.Unlock()
	if !started {
		return nil
	}
	closed := make(chan error, 1)
	go func() { closed <- w.router.Close() }()
	var err error
	select {
	case err = <-closed:
	case <-ctx.Done():
		w.cancel()
		w.abandon()
		err = <-closed
	}
	w.cancel()
	w.abandon()
	<-done
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil && w.runErr != nil {
		err = w.runErr
	}
	return err
}

// metrics is the router middleware that counts handled messages.
func (w *Worker) metrics(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		w.stats.records.Add(1)
		return h(msg)
	}
}

// errUnfinished is returned for a message that must be read again.
var errUnfinished = errors.New("the mutation was not finished; it is read again")

// pendingBatch collects the messages of one poll.
type pendingBatch struct {
	id, after string // MetadataBatch, MetadataBatchAfter
	entries   []*batchEntry
	arrived   int
	done      chan struct{}
}

type batchEntry struct {
	msg    *message.Message
	err    error // the message's result, set before done is closed
	parked bool  // nacked as parked (markParked)
	// behind: nacked unapplied because the poll before left its partition
	// unfinished (see holdBack); the subscriber reads it again with the
	// rest of the partition, so it does not hold back the next poll.
	behind bool
}

// batchOutcome is what the applier remembers of the poll it applied
// last, for a poll emitted while that one was in flight
// (MetadataBatchAfter): the partitions it left unfinished (the subscriber
// reads them again from there) and the records it parked.
type batchOutcome struct {
	id      string
	stopped map[int32]bool
	parked  map[recordRef]bool
}

// recordRef is a Kafka record key in a partition (one Sink record).
type recordRef struct {
	partition int32
	key       string
}

// Handle is the router handler (a message.NoPublishHandlerFunc): see Worker.
func (w *Worker) Handle(msg *message.Message) error {
	id, after, index, size, ok := w.batchOf(msg)
	// Decoding happens in the applier: in a fresh handler goroutine it
	// would grow the goroutine's stack for every message.
	e := &batchEntry{msg: msg}
	if !ok {
		b := &pendingBatch{entries: []*batchEntry{e}, done: make(chan struct{})}
		w.applyQ <- b
		<-b.done
		return e.err
	}
	w.mu.Lock()
	if w.abandoned {
		w.mu.Unlock()
		return fmt.Errorf("%w: %w", errUnfinished, context.Canceled)
	}
	b := w.batches[id]
	if b == nil {
		b = &pendingBatch{id: id, after: after, entries: make([]*batchEntry, size), done: make(chan struct{})}
		w.batches[id] = b
	}
	if b.entries[index] != nil {
		w.mu.Unlock()
		return fmt.Errorf("cannot handle message %s: position %d of batch %s delivered twice", msg.UUID, index, id)
	}
	b.entries[index] = e
	b.arrived++
	complete := b.arrived == len(b.entries)
	if complete {
		delete(w.batches, id)
	}
	w.mu.Unlock()
	if complete {
		w.applyQ <- b
	}
	// One channel per batch: the goroutines of a poll do not all wait on
	// one shared channel (abandon releases incomplete batches on cancel).
	<-b.done
	return e.err
}

// abandon releases the messages of batches that are still incomplete
// when the worker is canceled (they are nacked), and makes later messages
// of a batch fail at once.
func (w *Worker) abandon() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.abandoned = true
	for _, m := range []map[string]*pendingBatch{w.batches, w.held} {
		for id, b := range m {
			w.release(b)
			delete(m, id)
		}
	}
}

// applier applies the complete batches one after the other, in one
// long-lived goroutine (whose stack has grown to what applying needs, where
// a fresh handler goroutine would grow its stack for every batch). It runs
// from Start until the router has stopped.
//
// Polls are applied in the order the subscriber emitted them: a poll
// emitted while another was in flight (MetadataBatchAfter) may be complete
// first (the Router's goroutines run in any order); it is held until the
// poll it follows was applied, and then applied with that poll's outcome
// (see holdBack).
func (w *Worker) applier() {
	var last batchOutcome
	for b := range w.applyQ {
		for b != nil {
			if b.after != "" && b.after != last.id {
				w.mu.Lock()
				if w.abandoned {
					w.mu.Unlock()
					w.release(b)
					break
				}
				w.held[b.after] = b
				w.mu.Unlock()
				w.stats.held.Add(1)
				break
			}
			var prev *batchOutcome
			if b.after != "" {
				prev = &last
			}
			w.applySafely(b, prev)
			last = outcomeOf(b)
			close(b.done)
			w.mu.Lock()
			b = w.held[last.id]
			delete(w.held, last.id)
			w.mu.Unlock()
		}
	}
	// The router has stopped: no handler waits for a held poll any more.
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, b := range w.held {
		w.release(b)
		delete(w.held, id)
	}
}

// release nacks every message of b that arrived (the worker stops).
func (w *Worker) release(b *pendingBatch) {
	for _, e := range b.entries {
		if e != nil {
			e.err = fmt.Errorf("%w: %w", errUnfinished, context.Canceled)
		}
	}
	close(b.done)
}

// outcomeOf returns the outcome of the applied poll b.
func outcomeOf(b *pendingBatch) batchOutcome {
	o := batchOutcome{id: b.id}
	for _, e := range b.entries {
		if e.err == nil || e.behind {
			continue
		}
		src := sourceOf(e.msg)
		if e.parked {
			if o.parked == nil {
				o.parked = map[recordRef]bool{}
			}
			o.parked[recordRef{src.partition, e.msg.Metadata.Get(KeyMetadata)}] = true
			continue
		}
		if o.stopped == nil {
			o.stopped = map[int32]bool{}
		}
		o.stopped[src.partition] = true
	}
	return o
}

// applySafely applies b (after prev, when b was emitted while prev was in
// flight); a panic (like the Recoverer middleware's in a handler) nacks
// the batch's messages instead of ending the process.
func (w *Worker) applySafely(b *pendingBatch, prev *batchOutcome) {
	defer func() {
		if r := recover(); r != nil {
			// The panic value is not logged: it may quote a document.
			w.log.Error("panic while applying a batch; its messages are read again", "panic_type", fmt.Sprintf("%T", r), "stack", string(debug.Stack()))
			for _, e := range b.entries {
				e.err = fmt.Errorf("%w: the handler panicked (%T)", errUnfinished, r)
			}
		}
	}()
	w.apply(b.entries, prev)
}

// batchOf reads the batch metadata of msg; ok is false when there is none
// or it is not valid.
func (w *Worker) batchOf(msg *message.Message) (id, after string, index, size int, ok bool) {
	id = msg.Metadata.Get(MetadataBatch)
	if id == "" {
		return "", "", 0, 0, false
	}
	index, err1 := strconv.Atoi(msg.Metadata.Get(MetadataBatchIndex))
	size, err2 := strconv.Atoi(msg.Metadata.Get(MetadataBatchSize))
	if err1 != nil || err2 != nil || size < 1 || size > w.cfg.MaxBatch || index < 0 || index >= size {
		return "", "", 0, 0, false
	}
	return id, msg.Metadata.Get(MetadataBatchAfter), index, size, true
}

// source is where a message was read: its partition and offset when the
// subscriber says so (otherwise partition -1, offset -1).
type source struct {
	partition int32
	offset    int64
	known     bool
}

func sourceOf(msg *message.Message) source {
	p, err1 := strconv.ParseInt(msg.Metadata.Get(MetadataPartition), 10, 32)
	o, err2 := strconv.ParseInt(msg.Metadata.Get(MetadataOffset), 10, 64)
	if err1 != nil || err2 != nil {
		return source{partition: -1, offset: -1}
	}
	return source{partition: int32(p), offset: o, known: true}
}

// apply applies one batch (entries in poll order) and sets every entry's
// result: decode, apply, dead-letter.
//
// The batch's context ends when the worker is canceled, when the
// subscriber cancels the poll (a partition of it was revoked or lost: see
// Fence) and after BatchTimeout (the handler parks what still fails).
func (w *Worker) apply(entries []*batchEntry, prev *batchOutcome) {
	w.stats.batches.Add(1)
	ctx, cancel := context.WithTimeout(w.applyCtx, w.cfg.BatchTimeout)
	defer cancel()
	if len(entries) > 0 && entries[0].msg.Context() != nil {
		defer context.AfterFunc(entries[0].msg.Context(), cancel)()
	}
	srcs := make([]source, len(entries))
	for i, e := range entries {
		srcs[i] = sourceOf(e.msg)
	}
	dead := make([]*deadLetterInfo, len(entries))
	ctx, span := w.startProcess(ctx, entries)
	defer func() { endProcess(span, entries, dead) }()
	held := holdBack(prev, entries, srcs)
	muts, owners := w.decode(entries, srcs, dead, held)
	unfinished := w.applyMutations(ctx, muts, owners, entries, srcs, dead)
	w.resolve(muts, entries, srcs, dead, unfinished)
	w.deadLetter(muts, entries, srcs, dead, unfinished)
}

// holdBack settles, without applying them, the messages of a poll emitted
// while the poll prev was in flight that must wait for what prev left
// behind: those of a partition prev left unfinished are nacked (the
// subscriber reads the partition again from prev's first unfinished
// record), and those of a record prev parked are nacked as parked (they
// join the record's queue behind its parked mutations). Without this a
// record's later mutation could be applied before an earlier one. It
// reports the held messages.
//
// The subscriber leaves the nacked ones of an unfinished partition alone
// (it reads the partition again), so they do not make this poll's
// partition unfinished for the poll after it (batchEntry.behind).
func holdBack(prev *batchOutcome, entries []*batchEntry, srcs []source) []bool {
	if prev == nil || len(prev.stopped) == 0 && len(prev.parked) == 0 {
		return nil
	}
	held := make([]bool, len(entries))
	for i, e := range entries {
		switch {
		case prev.stopped[srcs[i].partition]:
			e.err = fmt.Errorf("%w: an earlier mutation of its partition was not finished", errUnfinished)
			e.behind = true
		case prev.parked[recordRef{srcs[i].partition, e.msg.Metadata.Get(KeyMetadata)}]:
			e.err = fmt.Errorf("%w: an earlier mutation of its record is parked", errUnfinished)
			e.parked = markParked(e.msg)
		default:
			continue
		}
		held[i] = true
	}
	return held
}

// decode decodes every message not held; undecodable ones get a
// dead-letter reason.
func (w *Worker) decode(entries []*batchEntry, srcs []source, dead []*deadLetterInfo, held []bool) ([]domain.Mutation, []int) {
	muts := make([]domain.Mutation, 0, len(entries))
	owners := make([]int, 0, len(entries))
	for i, e := range entries {
		if held != nil && held[i] {
			continue
		}
		m, err := decodeRecord([]byte(e.msg.Metadata.Get(KeyMetadata)), e.msg.Payload)
		if err != nil {
			w.log.Warn("undecodable mutation record: dead-lettering it", "partition", srcs[i].partition, "offset", srcs[i].offset, "error", err)
			dead[i] = &deadLetterInfo{reason: ReasonUndecodable, code: domain.CodeInvalidArgument, message: err.Error(), mutationID: validUTF8(e.msg.UUID), mut: -1}
			continue
		}
		if srcs[i].known {
			m.Source = domain.SourcePosition{Log: e.msg.Metadata.Get(MetadataLog), Partition: srcs[i].partition, Offset: srcs[i].offset}
		}
		muts = append(muts, m)
		owners = append(owners, i)
	}
	return muts, owners
}

// applyMutations hands the decoded mutations to the handler, sets the
// applied entries' results and the failures' dead-letter reasons, and
// returns, per partition, the first offset that did not finish (canceled).
func (w *Worker) applyMutations(ctx context.Context, muts []domain.Mutation, owners []int, entries []*batchEntry, srcs []source, dead []*deadLetterInfo) map[int32]int64 {
	stopAt := map[int32]int64{}
	if len(muts) == 0 {
		return stopAt
	}
	// A write that would overtake a failed mutation asks first whether
	// this worker still owns the batch's partitions (a frozen worker wakes
	// up mid-batch; its client may not know yet): see ports.FenceCheck.
	ctx = ports.WithFenceCheck(ctx, func(context.Context) error { return w.checkFence(entries) })
	outcomes := w.handler.ApplyMutations(ctx, muts)
	parked := w.park(muts, owners, outcomes, srcs)
	for j, i := range owners {
		o := ports.ApplyOutcome{Err: domain.Errorf(domain.CodeCanceled, "the handler returned no outcome")}
		if j < len(outcomes) {
			o = outcomes[j]
		}
		if o.Err == nil {
			if o.Superseded {
				w.stats.superseded.Add(1)
			}
			if o.Skipped {
				w.stats.skipped.Add(1)
			} else {
				w.stats.applied.Add(1)
			}
			continue
		}
		e := domain.AsError(o.Err)
		if parked[j] {
			w.stats.parked.Add(1)
			entries[i].err = fmt.Errorf("%w: %w", errUnfinished, e)
			if markParked(entries[i].msg) {
				entries[i].parked = true
				// The subscriber holds it (and its record's later
				// mutations) and delivers it again; the partition goes on.
				continue
			}
			if at, ok := stopAt[srcs[i].partition]; !ok || srcs[i].offset < at || !srcs[i].known {
				stopAt[srcs[i].partition] = srcs[i].offset
			}
			continue
		}
		if e.Code == domain.CodeCanceled {
			entries[i].err = fmt.Errorf("%w: %w", errUnfinished, context.Canceled)
			if at, ok := stopAt[srcs[i].partition]; !ok || srcs[i].offset < at || !srcs[i].known {
				stopAt[srcs[i].partition] = srcs[i].offset
			}
			continue
		}
		m := muts[j]
		dead[i] = &deadLetterInfo{reason: ReasonApplyFailed, code: e.Code, message: e.Error(), attempts: o.Attempts, mutationID: m.ID,
			mut: j, uncertain: uncertain(e.Code), detail: e.Message, overtaken: o.Overtaken}
	}
	return stopAt
}

// uncertain reports whether a failure with code c may hide a write that
// took place (an unknown outcome, a transient failure whose retries ran
// out after an earlier attempt's outcome was unknown, an unexpected
// answer): such a mutation is resolved against its record before it is
// dead-lettered. The other codes say that nothing was written.
func uncertain(c domain.Code) bool {
	switch c {
	case domain.CodeInvalidArgument, domain.CodeNotFound, domain.CodeAlreadyExists, domain.CodeRevisionMismatch,
		domain.CodeFailedPrecondition, domain.CodePermissionDenied, domain.CodeUnauthenticated, domain.CodeAborted:
		return false
	}
	return true
}

// park decides which failed outcomes are parked (delivered again later)
// rather than dead-lettered: retryable failures (the handler's time budget
// ended), unless the first of them of its record has used up MaxAttempts
// over its deliveries (then its outcome becomes "retries exhausted", it is
// dead-lettered and the record's later mutations move on).
func (w *Worker) park(muts []domain.Mutation, owners []int, outcomes []ports.ApplyOutcome, srcs []source) []bool {
	parked := make([]bool, len(owners))
	type recordKey struct {
		partition int32
		address   string
	}
	heads := map[recordKey]int{} // record → index (in owners) of its first parked mutation
	for j, i := range owners {
		if j >= len(outcomes) || outcomes[j].Err == nil {
			continue
		}
		e := domain.AsError(outcomes[j].Err)
		if e.Code == domain.CodeCanceled || !e.Retryable {
			continue
		}
		parked[j] = true
		k := recordKey{srcs[i].partition, muts[j].Address.String()}
		if h, ok := heads[k]; !ok || srcs[i].offset < srcs[owners[h]].offset {
			heads[k] = j
		}
	}
	if len(heads) == 0 {
		return parked
	}
	if len(w.attempts) > 4*w.cfg.MaxBatch {
		clear(w.attempts) // heads of partitions this worker no longer reads
	}
	for _, j := range heads {
		i := owners[j]
		if !srcs[i].known {
			continue
		}
		key := srcs[i]
		prev := w.attempts[key]
		if prev.id != muts[j].ID {
			prev = parkedAttempts{id: muts[j].ID}
		}
		prev.attempts += max(outcomes[j].Attempts, 1)
		if prev.attempts < w.cfg.MaxAttempts {
			w.attempts[key] = prev
			continue
		}
		delete(w.attempts, key)
		parked[j] = false
		e := domain.AsError(outcomes[j].Err)
		outcomes[j].Attempts = prev.attempts
		outcomes[j].Err = &domain.Error{Code: e.Code, Message: fmt.Sprintf("retries exhausted after %d attempts over several deliveries: %s", prev.attempts, e.Error()), Cause: e}
	}
	return parked
}

// resolve settles, before they are dead-lettered, the failed mutations
// whose failure may hide a write that took place (deadLetterInfo.
// uncertain): the handler (a ports.MutationResolver) reads their records'
// applied marks in one call. One found applied, or passed by a later
// mutation of its record (another worker handled it), is acked without a
// dead letter, counted as skipped; one whose record cannot be read is not
// dead-lettered now: it is parked (or nacked) and delivered again. A
// mutation this batch overtook (deadLetterInfo.overtaken) needs no
// resolution: the handler decided, atomically with the write that passed
// it, that its record's mark had not reached it — nobody applied it, and
// nobody will (ports.ApplyOutcome.Overtaken). A dead letter is only ever a
// mutation that was not applied.
func (w *Worker) resolve(muts []domain.Mutation, entries []*batchEntry, srcs []source, dead []*deadLetterInfo, stopAt map[int32]int64) {
	r, ok := w.handler.(ports.MutationResolver)
	if !ok {
		return
	}
	var idx []int
	var ask []domain.Mutation
	for i, d := range dead {
		if d != nil && d.uncertain && !d.overtaken && d.mut >= 0 && !beyond(stopAt, srcs[i]) {
			idx = append(idx, i)
			ask = append(ask, muts[d.mut])
		}
	}
	if len(ask) == 0 {
		return
	}
	// The batch's own context may have ended with its time budget.
	ctx, cancel := context.WithTimeout(w.applyCtx, w.cfg.DeadLetterTimeout)
	defer cancel()
	got := r.ResolveMutations(ctx, ask)
	for n, i := range idx {
		res := ports.ResolutionUnknown
		if n < len(got) {
			res = got[n]
		}
		d := dead[i]
		switch {
		case res == ports.ResolutionNotApplied:
			continue // not applied: dead-lettered
		case res == ports.ResolutionApplied, res == ports.ResolutionSuperseded:
			dead[i] = nil
			entries[i].err = nil
			w.stats.skipped.Add(1)
			w.stats.resolved.Add(1)
			if res == ports.ResolutionSuperseded {
				w.stats.superseded.Add(1)
			}
			w.log.Warn("a failed mutation was found handled after all: not dead-lettered", "mutation_id", d.mutationID,
				"resolution", res.String(), "partition", srcs[i].partition, "offset", srcs[i].offset, "code", d.code.String())
		default:
			dead[i] = nil
			w.stats.parked.Add(1)
			entries[i].err = fmt.Errorf("%w: it failed (%s) and whether it was applied cannot be told now", errUnfinished, d.code)
			if markParked(entries[i].msg) {
				entries[i].parked = true
				continue
			}
			if at, ok := stopAt[srcs[i].partition]; !ok || srcs[i].offset < at || !srcs[i].known {
				stopAt[srcs[i].partition] = srcs[i].offset
			}
		}
	}
}

// beyond reports whether src lies at or after its partition's first
// unfinished offset in stopAt (or its position is not known while the
// partition has one).
func beyond(stopAt map[int32]int64, src source) bool {
	at, ok := stopAt[src.partition]
	return ok && (src.offset > at || !src.known)
}

// deadLetter publishes the dead letters of records before their
// partition's first unfinished offset and waits for the acknowledgements;
// the others are nacked (read again).
//
// Fenced first: a worker that lost its partitions has no more side effects
// for them. Right before publishing, it checks that the batch was not
// fenced (Fence) and asks the group coordinator (Subscriber.CheckFence,
// which a worker that was frozen and woke up mid-batch needs: its client
// may not know yet). When fenced, its dead letters are nacked, for the
// partition's new owner to decide, except those of mutations this batch
// overtook (deadLetterInfo.overtaken: it wrote a later mutation of the
// record over a mark that had not reached them), which the new owner
// would skip as superseded: their dead letters are written, so none is
// lost.
func (w *Worker) deadLetter(muts []domain.Mutation, entries []*batchEntry, srcs []source, dead []*deadLetterInfo, stopAt map[int32]int64) {
	var idx []int
	var msgs []*message.Message
	now := w.cfg.Now()
	var fenced error
	checked := false
	for i, d := range dead {
		if d == nil {
			continue
		}
		if beyond(stopAt, srcs[i]) {
			entries[i].err = fmt.Errorf("%w: an earlier mutation of its partition was not finished", errUnfinished)
			continue
		}
		if !checked {
			fenced, checked = w.checkFence(entries), true
			if fenced != nil {
				w.log.Warn("not writing this batch's dead letters: the worker may have lost its partitions; the partitions' owner decides", "error", fenced)
			}
		}
		if fenced != nil && !d.overtaken {
			w.stats.withheld.Add(1)
			entries[i].err = fmt.Errorf("%w: %w", errUnfinished, fenced)
			continue
		}
		idx = append(idx, i)
		msgs = append(msgs, newDeadLetterMessage(entries[i].msg, w.cfg.Topic, srcs[i], *d, now))
	}
	if len(msgs) == 0 {
		return
	}
	failed := w.publishDeadLetters(msgs)
	counts := map[ports.DeadLetterReason]int{}
	for j, i := range idx {
		if failed[j] != nil {
			entries[i].err = fmt.Errorf("%w: cannot write it to the dead-letter topic: %w", errUnfinished, failed[j])
			continue
		}
		counts[deadLetterReason(dead[i])]++
		if d := dead[i]; d.mut >= 0 {
			m := &muts[d.mut]
			w.log.Warn("mutation failed permanently: dead-lettering it", "mutation_id", m.ID, "address", m.Address.String(),
				"kind", m.Kind.String(), "partition", srcs[i].partition, "offset", srcs[i].offset,
				"code", d.code.String(), "attempts", d.attempts, "error", d.detail)
		}
	}
	for reason, n := range counts {
		w.cfg.Observer.DeadLettered(reason, n)
	}
}

// checkFence reports why the batch of entries may no longer belong to
// this worker: its messages' context ended (the subscriber fenced the
// poll, or is closing), or the group coordinator does not see this member
// as a current owner (Subscriber.CheckFence). Nil: go ahead.
func (w *Worker) checkFence(entries []*batchEntry) error {
	if len(entries) > 0 {
		if c := entries[0].msg.Context(); c != nil && c.Err() != nil {
			return fmt.Errorf("%w: the poll was fenced or the worker is stopping (%w)", ErrFenced, c.Err())
		}
	}
	f, ok := w.sub.(interface{ CheckFence(context.Context) error })
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(w.applyCtx, w.cfg.DeadLetterTimeout)
	defer cancel()
	return f.CheckFence(ctx)
}

// publishDeadLetters publishes the dead-letter messages, retrying the
// failed ones with backoff until all are acknowledged or the worker is
// canceled. It returns each message's final error.
func (w *Worker) publishDeadLetters(msgs []*message.Message) []error {
	errs := make([]error, len(msgs))
	pending := make([]int, len(msgs))
	for i := range pending {
		pending[i] = i
	}
	backoff := 100 * time.Millisecond
	ctx, cancelAll := context.WithTimeout(w.applyCtx, w.cfg.DeadLetterTimeout)
	defer cancelAll()
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, w.cfg.DeadLetterTimeout)
		batch := make([]*message.Message, len(pending))
		for j, i := range pending {
			msgs[i].SetContext(attemptCtx)
			batch[j] = msgs[i]
		}
		err := w.pub.Publish(w.cfg.DeadLetterTopic, batch...)
		cancel()
		if err == nil {
			w.stats.deadLettered.Add(int64(len(pending)))
			for _, i := range pending {
				errs[i] = nil
			}
			return errs
		}
		retry := pending
		var pe *PublishError
		if errors.As(err, &pe) {
			retry = make([]int, 0, len(pe.Failed))
			for _, f := range pe.Failed {
				if f.Index >= 0 && f.Index < len(pending) {
					retry = append(retry, pending[f.Index])
				}
			}
		}
		w.stats.deadLettered.Add(int64(len(pending) - len(retry)))
		for _, i := range pending {
			errs[i] = nil
		}
		for _, i := range retry {
			errs[i] = err
		}
		pending = retry
		w.log.Warn("cannot write to the dead-letter topic; retrying", "topic", w.cfg.DeadLetterTopic, "records", len(pending), "error", err)
		if !ctxtime.Sleep(ctx, backoff) {
			// Not acknowledged within DeadLetterTimeout: nacked, read again.
			return errs
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// routerLogger is the Router's watermill.LoggerAdapter on slog: the
// Router's info messages are logged at debug level, and fields are only
// converted when the level is enabled (the Router logs per message).
type routerLogger struct{ l *slog.Logger }

var _ watermill.LoggerAdapter = routerLogger{}

func (r routerLogger) log(level slog.Level, msg string, fields watermill.LogFields, extra ...any) {
	if !r.l.Enabled(context.Background(), level) {
		return
	}
	args := make([]any, 0, 2*len(fields)+len(extra))
	for k, v := range fields {
		args = append(args, k, v)
	}
	r.l.Log(context.Background(), level, msg, append(args, extra...)...)
}

func (r routerLogger) Error(msg string, err error, fields watermill.LogFields) {
	r.log(slog.LevelError, msg, fields, "error", err)
}
func (r routerLogger) Info(msg string, fields watermill.LogFields) {
	r.log(slog.LevelDebug, msg, fields)
}
func (r routerLogger) Debug(msg string, fields watermill.LogFields) {
	r.log(slog.LevelDebug, msg, fields)
}
func (r routerLogger) Trace(msg string, fields watermill.LogFields) {
	r.log(watermill.LevelTrace, msg, fields)
}

func (r routerLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	args := make([]any, 0, 2*len(fields))
	for k, v := range fields {
		args = append(args, k, v)
	}
	return routerLogger{r.l.With(args...)}
}
