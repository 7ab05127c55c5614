// Package application holds Sink's use cases: validation, ordering in
// dependency waves, batching, merges with compare-and-set retries, async
// submission to the mutation queue, and the worker's apply path. It imports
// only domain and ports.
package application

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Service executes Sink's Read, Write and Delete use cases and applies queued
// mutations. It is safe for concurrent use.
type Service struct {
	cfg      Config
	storage  ports.Storage
	queue    ports.MutationQueue // nil: async completion is disabled
	profiles map[string]ports.MergeProfile
	// mediaTypes: the media types each profile declares, lower-cased.
	mediaTypes map[string][]string
	// admission: see WithAdmission; nil admits everything.
	admission ports.Admission
	log       *slog.Logger
	now       func() time.Time
	obs       Observer
	// requirePrincipal: see RequirePrincipal (authorize.go).
	requirePrincipal bool
	// fingerprintPolicy: see WithFingerprintPolicy (fingerprint.go).
	fingerprintPolicy FingerprintPolicy
	// writes and reads batch concurrent callers' storage work (natural
	// batching, Config.Batch), one combiner per shard of records; nil when
	// it is off.
	writes []*combiner[*job]
	reads  []*combiner[*readJob]
	// extraStores: see WithStores; stores, when set, is storage itself
	// (one adapter per served store).
	extraStores map[string]ports.Storage
	stores      *storeSet
}

// Option customizes a Service.
type Option func(*Service)

// WithQueue enables RETURN_AFTER_ACCEPTED through the given queue.
func WithQueue(q ports.MutationQueue) Option { return func(s *Service) { s.queue = q } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(s *Service) { s.log = l } }

// WithObserver sets the observer that receives measurements.
func WithObserver(o Observer) Option { return func(s *Service) { s.obs = o } }

// WithAdmission makes the service ask a before doing any work for a
// request: it is asked once per request, with the operations that passed
// validation and authorization only (see ports.Admission).
func WithAdmission(a ports.Admission) Option { return func(s *Service) { s.admission = a } }

// WithClock sets the clock used for submission times (tests).
func WithClock(now func() time.Time) Option { return func(s *Service) { s.now = now } }

// NewService returns a service over storage with the given merge profiles.
func NewService(cfg Config, storage ports.Storage, profiles []ports.MergeProfile, opts ...Option) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cannot create the application service: %w", err)
	}
	if storage == nil {
		return nil, fmt.Errorf("cannot create the application service: no storage")
	}
	s := &Service{
		cfg:        cfg,
		storage:    storage,
		profiles:   make(map[string]ports.MergeProfile, len(profiles)),
		mediaTypes: make(map[string][]string, len(profiles)),
		log:        slog.Default(),
		now:        time.Now,
		obs:        ports.NopObserver{},
	}
	for _, p := range profiles {
		name := p.Name()
		if name == "" {
			return nil, fmt.Errorf("cannot register merge profile %T: empty name", p)
		}
		if other, dup := s.profiles[name]; dup {
			return nil, fmt.Errorf("cannot register merge profile %q twice: it is defined by %s and by %s", name, profileOrigin(other), profileOrigin(p))
		}
		if len(p.ContentTypes()) == 0 {
			return nil, fmt.Errorf("cannot register merge profile %q: it declares no content types", name)
		}
		for _, ct := range p.ContentTypes() {
			mt, err := domain.MediaType(ct)
			if err != nil {
				return nil, fmt.Errorf("cannot register merge profile %q: content type %q %w", name, ct, err)
			}
			s.mediaTypes[name] = append(s.mediaTypes[name], mt)
		}
		s.profiles[name] = p
	}
	for _, o := range opts {
		o(s)
	}
	if len(s.extraStores) > 0 {
		ss, err := newStoreSet(cfg.Store, storage, s.extraStores)
		if err != nil {
			return nil, fmt.Errorf("cannot create the application service: %w", err)
		}
		s.stores, s.storage = ss, ss
	}
	if cfg.Batch.Enabled {
		n := cfg.Batch.Shards * len(s.Stores())
		s.writes = make([]*combiner[*job], n)
		s.reads = make([]*combiner[*readJob], n)
		for k := range s.writes {
			w := &combiner[*job]{max: cfg.Batch.MaxOps, size: func(j *job) int { return len(j.valid) }, run: s.runWrites, carry: carryJob}
			if s.keepsHints() {
				w.queued = func(j *job) func() { return s.prefold(&w.hints, j) }
			}
			s.writes[k] = w
			s.reads[k] = &combiner[*readJob]{max: cfg.Batch.MaxOps, size: func(j *readJob) int { return len(j.addrs) }, run: s.runReads,
				carry: func(*readJob) bool { return true }}
		}
	}
	return s, nil
}

// Store returns the name of the served store.
func (s *Service) Store() string { return s.cfg.Store }

// Limits returns the configured request limits.
func (s *Service) Limits() Limits { return s.cfg.Limits }

// AsyncEnabled reports whether RETURN_AFTER_ACCEPTED is available.
func (s *Service) AsyncEnabled() bool { return s.queue != nil }

func (s *Service) profileNames() string {
	names := make([]string, 0, len(s.profiles))
	for n := range s.profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// checkRequest validates the shape of a whole request.
func (s *Service) checkRequest(n int, bytes int) *domain.Error {
	switch {
	case n == 0:
		return domain.Errorf(domain.CodeInvalidArgument, "request has no operations")
	case n > s.cfg.Limits.MaxOperations:
		return domain.Errorf(domain.CodeInvalidArgument, "request has %d operations; the limit is %d", n, s.cfg.Limits.MaxOperations)
	case bytes > s.cfg.Limits.MaxRequestBytes:
		msg := fmt.Sprintf("request carries %d bytes of keys and documents; the limit is %d", bytes, s.cfg.Limits.MaxRequestBytes)
		if s.cfg.MaxRequestBytesSetting != "" {
			msg += " (" + s.cfg.MaxRequestBytesSetting + ")"
		}
		return &domain.Error{Code: domain.CodeResourceExhausted, Message: msg}
	}
	return nil
}

// Read reads the addressed records. The error is a whole-request error;
// per-operation problems are in the results. The results' documents are
// read-only (their bytes may be storage's own: ports.Storage.Read). The
// caller may give the results back once it no longer reads them
// (ReleaseReadResults). Read keeps nothing of addrs once it returned (it
// copies the addresses it reads): the caller may reuse the slice.
func (s *Service) Read(ctx context.Context, addrs []domain.Address) ([]ReadResult, error) {
	size := 0
	for _, a := range addrs {
		size += a.Key.Size()
	}
	if err := s.checkRequest(len(addrs), size); err != nil {
		return nil, err
	}
	if err := s.checkCaller(ctx); err != nil {
		return nil, err
	}
	if err := s.checkDeadline(ctx); err != nil {
		return nil, err
	}
	results, v, valid, pos, j, bufs, one := readSlices(len(addrs))
	// The buffers go back to their pool once this call is done with them,
	// unless the caller left the batch carrying its reads, which may still
	// read valid and write the job (see readBufs).
	left := false
	defer func() {
		if !left {
			bufs.release()
			oneReadBufPool.put(one)
		}
	}()
	cost := 0
	for i := range addrs {
		a := addrs[i]
		ref := readRef(i)
		if err := s.normalizeAddress(ref, &a); err != nil {
			results[i] = ReadResult{Status: StatusFailed, Err: err}
			continue
		}
		v.datasets[i] = a.DatasetRef()
		if err := s.authorize(ctx, ref, 0, a); err != nil {
			results[i] = ReadResult{Status: StatusFailed, Err: err}
			continue
		}
		if err := s.storage.Validate(ports.WriteOp{Kind: ports.WriteDelete, Address: a}); err != nil {
			results[i] = ReadResult{Status: StatusFailed, Err: s.storageRejected(ref, a.Store, err)}
			continue
		}
		v.admitted[i] = true
		valid = append(valid, a)
		pos = append(pos, i)
		cost += a.Key.Size()
	}
	if err := s.admit(ctx, len(valid), cost); err != nil {
		return nil, err
	}
	defer s.observeReads(ctx, v, results)
	if len(valid) == 0 {
		return results, nil
	}
	got, left := s.readStorage(ctx, j, valid)
	for k, r := range got {
		i := pos[k]
		switch {
		case r.Err != nil:
			results[i] = ReadResult{Status: StatusFailed, Err: opError(readRef(i), fieldAddress, r.Err)}
		case !r.Found:
			results[i] = ReadResult{Status: StatusNotFound}
		default:
			results[i] = ReadResult{Status: StatusFound, Record: r.Record}
		}
	}
	return results, nil
}

// readSlices returns Read's per-operation slices for n reads: results,
// the verdicts, the valid addresses and their positions (both empty, with
// room for n), the job to read them with (nil: readStorage allocates it),
// and the pooled buffers that hold all of them but the results, for the
// caller to release: readBufs for several reads, oneReadBufs (with the
// job) for one. Several reads' results come from a pool too (see
// resultPool), for Read's caller to give back; one read's is an
// allocation of its own.
func readSlices(n int) ([]ReadResult, verdicts, []domain.Address, []int, *readJob, *readBufs, *oneReadBufs) {
	if n == 1 {
		b := oneReadBufPool.get()
		return new([1]ReadResult)[:], verdicts{datasets: b.datasets[:], admitted: b.admitted[:], outcomes: b.outcomes[:], errs: b.errs[:]}, b.valid[:0], b.pos[:0], &b.job, nil, b
	}
	b := getReadBufs(n)
	return readResults.get(n), verdicts{datasets: b.datasets, admitted: b.admitted, outcomes: b.outcomes, errs: b.errs}, b.valid, b.pos, nil, b, nil
}

// admit asks the admission port (when there is one) whether the valid,
// authorized operations of a request may run. Requests without any are
// not charged.
func (s *Service) admit(ctx context.Context, ops, bytes int) error {
	if s.admission == nil || ops == 0 {
		return nil
	}
	var name string
	if p, ok := domain.PrincipalFrom(ctx); ok {
		name = p.Name
	}
	return s.admission.Admit(ctx, ports.AdmissionRequest{Principal: name, Operations: ops, Bytes: bytes})
}

// Write applies or enqueues puts and merges (mutations of kind put or
// merge), one result per mutation, in order. It copies muts before it
// changes or keeps any of them (work that goes on after a caller left at
// its deadline uses the copy): the caller may reuse the slice once Write
// has returned (the gRPC adapter pools batches' slices). The documents'
// bytes are handed over: neither the caller nor whoever gave it them
// changes them after the call, each in an allocation of its own (the
// service keeps them as records' latest states for later merges, and
// hands them over to storage: ports.WriteOp.HandOver). The caller may give
// the results back once it no longer reads them (ReleaseWriteResults).
func (s *Service) Write(ctx context.Context, muts []domain.Mutation, completion Completion) ([]WriteResult, error) {
	return s.mutate(ctx, muts, completion, domain.MutationPut, domain.MutationMerge)
}

// Delete applies or enqueues deletes (mutations of kind delete). Like
// Write, it keeps nothing of muts, and the caller may give the results
// back (ReleaseWriteResults).
func (s *Service) Delete(ctx context.Context, muts []domain.Mutation, completion Completion) ([]WriteResult, error) {
	return s.mutate(ctx, muts, completion, domain.MutationDelete)
}

func (s *Service) mutate(ctx context.Context, muts []domain.Mutation, completion Completion, kinds ...domain.MutationKind) ([]WriteResult, error) {
	size := 0
	for i := range muts {
		size += muts[i].Address.Key.Size() + len(muts[i].Document.Data) + len(muts[i].Merge.Intent.Data)
	}
	if err := s.checkRequest(len(muts), size); err != nil {
		return nil, err
	}
	if err := s.checkCaller(ctx); err != nil {
		return nil, err
	}
	if err := s.checkDeadline(ctx); err != nil {
		return nil, err
	}
	switch completion {
	case WaitUntilApplied:
	case ReturnAfterAccepted:
		if s.queue == nil {
			msg := "completion mode RETURN_AFTER_ACCEPTED needs a durable mutation queue, and none is configured"
			if s.cfg.AsyncDisabledHint != "" {
				msg += ": " + s.cfg.AsyncDisabledHint
			}
			return nil, domain.Errorf(domain.CodeFailedPrecondition, "%s", msg)
		}
	default:
		return nil, domain.Errorf(domain.CodeInvalidArgument, "unknown completion mode %d", completion)
	}

	results, work, valid, v, j, bufs, one := mutateSlices(muts)
	copy(work, muts)
	// The buffers go back to their pool once this call is done with them
	// (after observeMutations, deferred below) unless the caller left the
	// batch carrying its job, which may still use them: then they are left
	// to the collector (see opBufs).
	left := false
	defer func() {
		if !left {
			bufs.release()
			oneBufPool.put(one)
		}
	}()
	cost := 0
	var now time.Time // (a clock read, for queued mutations only)
	// keyed: the first operation of each (record, idempotency key);
	// repeated: such a first operation -> the first that repeated it.
	var keyed map[keyedRecord]int
	var repeated map[int]int
	for i := range work {
		m := &work[i]
		ref := requestRef(i, m.Kind)
		if !slices.Contains(kinds, m.Kind) {
			results[i] = failed(invalid(ref, "kind", "must be one of %s, got %s", kindNames(kinds), m.Kind))
			continue
		}
		if err := s.normalizeAddress(ref, &m.Address); err != nil {
			results[i] = failed(err)
			continue
		}
		v.datasets[i] = m.Address.DatasetRef()
		if err := s.checkMutation(ref, m); err != nil {
			results[i] = failed(err)
			continue
		}
		if m.ReturnDocument && (completion == ReturnAfterAccepted || m.Kind == domain.MutationDelete) {
			// Nothing to return before a worker applied it (and a delete
			// leaves no document).
			results[i] = failed(invalid(ref, fieldReturnDocument, "is only available for puts and merges with completion WAIT_UNTIL_APPLIED"))
			continue
		}
		if err := s.authorize(ctx, ref, m.Kind, m.Address); err != nil {
			results[i] = failed(err)
			continue
		}
		if m.Keyed {
			k := keyedRecord{m.Address.ID(), m.ID}
			if first, ok := keyed[k]; ok {
				results[i] = failed(invalid(ref, fieldIdempotencyKey,
					"is also the idempotency key of operations[%d] on the same record; a key names one change of a record", first))
				if _, ok := repeated[first]; !ok {
					repeated[first] = i
				}
				continue
			}
			if keyed == nil {
				keyed, repeated = make(map[keyedRecord]int), make(map[int]int)
			}
			keyed[k] = i
		}
		// Only queued mutations need an id and a submission time (the
		// worker's results and logs name them by id).
		if completion == ReturnAfterAccepted {
			if m.ID == "" {
				m.ID = NewMutationID()
			}
			if m.SubmittedAt.IsZero() {
				if now.IsZero() {
					now = s.now()
				}
				m.SubmittedAt = now
			}
			s.stampFingerprint(m)
		}
		v.admitted[i] = true
		valid = append(valid, i)
		cost += m.Address.Key.Size() + len(m.Document.Data) + len(m.Merge.Intent.Data)
	}
	if len(repeated) > 0 {
		// The first operation with a repeated key fails too: which of
		// them the client meant is not Sink's guess.
		kept := valid[:0]
		for _, i := range valid {
			second, ok := repeated[i]
			if !ok {
				kept = append(kept, i)
				continue
			}
			m := &work[i]
			results[i] = failed(invalid(requestRef(i, m.Kind), fieldIdempotencyKey,
				"is also the idempotency key of operations[%d] on the same record; a key names one change of a record", second))
			v.admitted[i] = false
			cost -= m.Address.Key.Size() + len(m.Document.Data) + len(m.Merge.Intent.Data)
		}
		valid = kept
	}
	if err := s.admit(ctx, len(valid), cost); err != nil {
		return nil, err
	}
	defer s.observeMutations(ctx, useCaseOf(kinds), work, v, completion, results)
	if len(valid) == 0 {
		return results, nil
	}
	if completion == ReturnAfterAccepted {
		s.submit(ctx, work, valid, results, func(i int) opRef { return requestRef(i, work[i].Kind) })
		return results, nil
	}
	left = s.execute(ctx, j, work, valid, results, nil, false)
	if left && bufs != nil {
		// The batch carrying the job goes on without the caller: it
		// writes a results slice of the job's own (carryJob), never
		// results, but the caller may give back what it gets
		// (ReleaseWriteResults) and a slice any batch held is never
		// pooled: it gets a copy (a rare allocation, at a deadline).
		results = slices.Clone(results)
	}
	return results, nil
}

// oneMutation is the allocation of a request of one operation (the
// single-record form, which most requests are): its result, which goes
// back to the caller, and its job, which is never reused (a prefold may
// keep a pointer to it, see takePrefold). The rest of its per-operation
// state comes from a pool (oneBufs).
type oneMutation struct {
	results [1]WriteResult
	job     job
}

// mutateSlices returns mutate's per-operation slices for muts: results,
// the working copy of the mutations, the valid indexes (empty, with room
// for all) and the verdicts, the job to execute them with (nil: execute
// allocates it), and the pooled buffers that hold all of them but the
// results and the job, for the caller to release: opBufs for several
// mutations, oneBufs (with the buffers of the first wave and fold that
// carry it) for one. Several mutations' results come from a pool too (see
// resultPool), for mutate's caller to give back.
func mutateSlices(muts []domain.Mutation) ([]WriteResult, []domain.Mutation, []int, verdicts, *job, *opBufs, *oneBufs) {
	n := len(muts)
	if n == 1 {
		b := oneBufPool.get()
		one := new(oneMutation)
		one.job.wave = &b.wave
		if muts[0].Kind == domain.MutationMerge {
			one.job.fold = &b.fold
		}
		return one.results[:], b.work[:], b.valid[:0], verdicts{datasets: b.datasets[:], admitted: b.admitted[:], outcomes: b.outcomes[:], errs: b.errs[:]}, &one.job, nil, b
	}
	b := getOpBufs(n)
	// The job itself is not pooled: a prefold (see takePrefold) may hold
	// a pointer to it, which must never name another request's job.
	j := &job{ids: b.ids}
	return writeResults.get(n), b.work, b.valid, verdicts{datasets: b.datasets, admitted: b.admitted, outcomes: b.outcomes, errs: b.errs}, j, b, nil
}

// keyedRecord is an idempotency key on one record (a key's scope).
type keyedRecord struct {
	rid domain.RecordID
	key string
}

func kindNames(kinds []domain.MutationKind) string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.String()
	}
	return strings.Join(names, " or ")
}

// submit enqueues the valid mutations and fills in their results.
func (s *Service) submit(ctx context.Context, work []domain.Mutation, valid []int, results []WriteResult, refs func(int) opRef) {
	batch := make([]domain.Mutation, len(valid))
	for j, i := range valid {
		batch[j] = work[i]
	}
	start := time.Now()
	errs := s.queue.Submit(ctx, batch)
	s.obs.QueuePublish(len(batch), time.Since(start))
	for j, i := range valid {
		var err error
		if j < len(errs) {
			err = errs[j]
		} else {
			err = domain.Errorf(domain.CodeInternal, "queue returned no result for this mutation")
		}
		if err != nil {
			results[i] = WriteResult{Status: StatusFailed, Err: opError(refs(i), fieldAddress, err)}
			continue
		}
		results[i] = WriteResult{Status: StatusAccepted, MutationID: batch[j].ID}
	}
}

// NewMutationID returns a random, unique mutation id (a UUID version 4).
func NewMutationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:], b[10:])
	return string(out[:])
}
