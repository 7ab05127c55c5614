// Package mongodb is the MongoDB storage adapter: a ports.Storage over the
// official Go driver (go.mongodb.org/mongo-driver/v2).
//
// Mapping:
//   - A namespace is a database and a dataset a collection of the same name,
//     unless SINK_MONGODB_BINDINGS binds the pair to another, existing
//     database/collection.
//   - The record key is the document's _id: string, int64, binary subtype 0
//     (bytes keys) or ObjectID.
//   - Documents are application/bson and pass through without conversion:
//     reads return the stored bytes minus Sink's hidden field. When a client
//     document has no _id, the adapter prepends it (the key), so the stored
//     document is _id + the client's fields in their order + the hidden field,
//     and notes in the hidden field that it added _id, which reads then leave
//     out again: a client reads back exactly the bytes it wrote. A client _id
//     that is not first is moved first (MongoDB keeps _id first).
//   - The hidden field (SINK_MONGODB_HIDDEN_FIELD, default "__sink") holds
//     {"v": 1, "rev": ObjectID[, "idAdded": true][, "m": applied mark]}. It
//     is added the first time Sink writes a record; a record without it is a
//     legacy record and reads with the revision LegacyRevision. The applied
//     mark ({"l": log, "p": partition, "o": offset, "r": [{"i": mutation
//     id, "v": revision}, ...]}) is added by the first write that carries
//     one (ports.WriteOp.Mark) and kept by every later put.
package mongodb

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/check"
	"github.com/sink-io/sink/ports"
)

var _ ports.Storage = (*Store)(nil)

// DefaultHiddenField is the default name of the hidden metadata field.
const DefaultHiddenField = "__sink"

// DefaultMaxConcurrency bounds the individual operations (conditional writes,
// deletes) and per-collection queries one call runs at once.
const DefaultMaxConcurrency = 16

// Bulk write defaults, chosen for MongoDB: one Write call's unconditional
// puts and creates go out in bulks of at most DefaultBulkChunk operations,
// DefaultBulkConcurrency at a time (SINK_MONGODB_BULK_CHUNK,
// SINK_MONGODB_BULK_CONCURRENCY). FerretDB v1 (SQLite) stops answering, for
// good, once about 100 documents are being modified by update commands at
// the same time: against it use FerretDBBulkChunk and
// FerretDBBulkConcurrency (the test harness does).
const (
	DefaultBulkChunk       = 1000
	DefaultBulkConcurrency = 4

	FerretDBBulkChunk       = 48
	FerretDBBulkConcurrency = 1
)

// Options configure a Store.
type Options struct {
	// Store is the store name used in messages (default "primary").
	Store string
	// HiddenField is the top-level field for Sink's metadata (default "__sink").
	HiddenField string
	// Bindings map logical datasets to existing collections.
	Bindings []Binding
	// MaxConcurrency bounds concurrent operations per call (default
	// DefaultMaxConcurrency).
	MaxConcurrency int
	// BulkChunk is the most operations per bulk write (default
	// DefaultBulkChunk, at most 100000: MongoDB's limit).
	BulkChunk int
	// BulkConcurrency is how many bulk writes of one call run at once
	// (default DefaultBulkConcurrency).
	BulkConcurrency int
	// MarkRing is the most mutation IDs a record's applied mark keeps
	// (default domain.DefaultAppliedRing, at most domain.MaxAppliedRing). Room
	// for a full ring of IDs of domain.MaxMutationIDBytes is reserved in
	// every document's size limit, so a document Validate accepts can always
	// be written; a write's MarkUpdate.Keep above it is lowered to it.
	MarkRing int
	// TracerProvider makes a span per Read and Write call (nil: no
	// tracing; see tracing.go).
	TracerProvider trace.TracerProvider
	// NoUpdatePipelines makes puts without a mark keep the record's mark
	// with the filter {_id, "<hidden>.m": {$exists: false}} even on servers
	// that take update pipelines (see pipelines).
	NoUpdatePipelines bool
}

// DefaultOptions returns Options with every default filled in.
func DefaultOptions() Options {
	var o Options
	o.setDefaults()
	return o
}

// setDefaults fills the zero fields with the defaults.
func (o *Options) setDefaults() {
	if o.Store == "" {
		o.Store = "primary"
	}
	if o.HiddenField == "" {
		o.HiddenField = DefaultHiddenField
	}
	if o.MaxConcurrency == 0 {
		o.MaxConcurrency = DefaultMaxConcurrency
	}
	if o.BulkChunk == 0 {
		o.BulkChunk = DefaultBulkChunk
	}
	if o.BulkConcurrency == 0 {
		o.BulkConcurrency = DefaultBulkConcurrency
	}
	if o.MarkRing == 0 {
		o.MarkRing = domain.DefaultAppliedRing
	}
}

// Validate reports every problem of the options at once (bindings are
// checked by New). Messages name the fields. Call it on defaulted options.
func (o Options) Validate() error {
	var p check.Problems
	if o.HiddenField == "" || o.HiddenField == idKey || o.HiddenField[0] == '$' || strings.ContainsAny(o.HiddenField, ".\x00") {
		p.Add("HiddenField %q must not be empty or _id, start with '$' or contain '.' or NUL", o.HiddenField)
	}
	p.Positive("MaxConcurrency", o.MaxConcurrency)
	p.Positive("BulkChunk", o.BulkChunk)
	p.Positive("BulkConcurrency", o.BulkConcurrency)
	if o.BulkChunk > maxWriteBatchSize {
		p.Add("BulkChunk must be at most %d (MongoDB's limit on the operations of one write command), got %d", maxWriteBatchSize, o.BulkChunk)
	}
	if o.MarkRing < 1 || o.MarkRing > domain.MaxAppliedRing {
		p.Add("MarkRing must be between 1 and %d, got %d", domain.MaxAppliedRing, o.MarkRing)
	}
	return p.Err()
}

// Store is the MongoDB ports.Storage. It is safe for concurrent use and
// shares the caller's *mongo.Client, whose pool size and timeouts come from
// the connection string.
type Store struct {
	client *mongo.Client
	enc    encoder
	names  *mapper
	limit  int
	// bulkChunk is the most operations per bulk write, bulkConcurrency the
	// bulk writes of one call that run at once.
	bulkChunk, bulkConcurrency int
	// markRing is Options.MarkRing.
	markRing int
	// tracer is nil when tracing is off (tracing.go).
	tracer trace.Tracer

	// untrustedUpdateBulks is set once the server answered an update bulk
	// in a way that does not attribute results to operations (FerretDB).
	untrustedUpdateBulks atomic.Bool
	// pipelineState is pipelinesUnknown, pipelinesYes or pipelinesNo (see
	// pipelines).
	pipelineState atomic.Int32

	mu    sync.RWMutex
	colls map[target]*mongo.Collection
}

// New returns a Store over client. It performs no I/O.
func New(client *mongo.Client, opts Options) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("cannot create the MongoDB store: no client")
	}
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("cannot create the MongoDB store: %w", err)
	}
	m, err := newMapper(opts.Bindings)
	if err != nil {
		return nil, fmt.Errorf("cannot create the MongoDB store: %w", err)
	}
	s := &Store{
		client:          client,
		enc:             encoder{hidden: opts.HiddenField, store: opts.Store, reserve: metaOverhead(opts.HiddenField, opts.MarkRing)},
		markRing:        opts.MarkRing,
		names:           m,
		limit:           opts.MaxConcurrency,
		bulkChunk:       opts.BulkChunk,
		bulkConcurrency: opts.BulkConcurrency,
		colls:           map[target]*mongo.Collection{},
		tracer:          tracerOf(opts.TracerProvider),
	}
	if opts.NoUpdatePipelines {
		s.pipelineState.Store(pipelinesNo)
	}
	return s, nil
}

// HiddenField returns the name of the hidden metadata field.
func (s *Store) HiddenField() string { return s.enc.hidden }

// ReservedBytes is the room every document's size check reserves for the
// hidden field with a full applied-mark ring (Options.MarkRing IDs of
// domain.MaxMutationIDBytes and a log identity of domain.MaxLogBytes): a client
// document (without _id) fits when it has at most MaxDocumentBytes minus
// this minus the _id's size.
func (s *Store) ReservedBytes() int { return s.enc.reserve }

func (s *Store) collection(t target) *mongo.Collection {
	s.mu.RLock()
	c, ok := s.colls[t]
	s.mu.RUnlock()
	if ok {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok = s.colls[t]; !ok {
		c = s.client.Database(t.Database, readOptions).Collection(t.Collection)
		s.colls[t] = c
	}
	return c
}

// readOptions fix how every read of the Store reads, whatever the URI says
// (readPreference, readConcernLevel): from the primary, with read concern
// "local". The storage port does not tell the reads that feed a merge from
// the others, and both need them:
//   - primary: a secondary lags, so a merge would read a stale revision and
//     keep failing its compare-and-set, and a client would not read its own
//     writes;
//   - "local": the primary's newest data, including writes not yet
//     replicated to a majority. "majority" reads would lag behind writes
//     acknowledged with w:1 (and, briefly, behind the primary's newest
//     state), with the same stale-revision problem. A read may return data
//     a failover later rolls back; a merge built on it then fails its
//     compare-and-set on the new primary and reads again.
//
// Writes use the URI's write concern.
var readOptions = options.Database().SetReadPreference(readpref.Primary()).SetReadConcern(readconcern.Local())

// invalidArg returns the invalid-argument error for a problem with op.
func invalidArg(format string, args ...any) *domain.Error {
	return domain.Errorf(domain.CodeInvalidArgument, format, args...)
}

// Validate implements ports.Storage: names, key, content type and document
// shape, without I/O.
func (s *Store) Validate(op ports.WriteOp) error {
	if _, err := s.names.resolve(op.Address); err != nil {
		return invalidArg("%v", err)
	}
	if _, err := keyValue(op.Address.Key); err != nil {
		return invalidArg("%v", err)
	}
	switch op.Kind {
	case ports.WritePut:
		if _, err := s.enc.body(op.Address.Key, op.Document, false); err != nil {
			return invalidArg("%v", err)
		}
	case ports.WriteDelete:
	default:
		return invalidArg("unknown write kind %d", op.Kind)
	}
	return validMark(op.Mark)
}

// validMark checks a write's mark update against the limits the stored
// mark's reserved room assumes.
func validMark(m *ports.MarkUpdate) error {
	if m == nil {
		return nil
	}
	if len(m.IDs) == 0 {
		return invalidArg("an applied-mark update names no mutation")
	}
	for i, id := range m.IDs {
		if id == "" || len(id) > domain.MaxMutationIDBytes {
			return invalidArg("mutation ID %d of the applied-mark update is %d bytes, want 1 to %d", i, len(id), domain.MaxMutationIDBytes)
		}
	}
	if len(m.Position.Log) > domain.MaxLogBytes {
		return invalidArg("the log identity of the applied-mark update is %d bytes, at most %d are allowed", len(m.Position.Log), domain.MaxLogBytes)
	}
	return nil
}

// ContentTypes implements ports.Storage: MongoDB holds BSON documents only.
func (s *Store) ContentTypes() []string { return []string{domain.ContentTypeBSON} }

// Ping implements ports.Storage.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx, readpref.Primary()); err != nil {
		return classify(fmt.Errorf("cannot ping MongoDB: %w", err))
	}
	return nil
}

// Read implements ports.Storage: one $in query per collection, the
// collections queried concurrently.
func (s *Store) Read(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	out := make([]ports.ReadResult, len(addrs))
	ctx, span := s.startSpan(ctx, "read", len(addrs))
	defer endReadSpan(span, out)
	groups := map[target][]int{}
	var order []target
	for i, a := range addrs {
		t, err := s.names.resolve(a)
		if err != nil {
			out[i].Err = invalidArg("%v", err)
			continue
		}
		if _, err := keyValue(a.Key); err != nil {
			out[i].Err = invalidArg("%v", err)
			continue
		}
		if _, ok := groups[t]; !ok {
			order = append(order, t)
		}
		groups[t] = append(groups[t], i)
	}
	if span != nil {
		spanTargets(span, "read", len(order), func(g int) target { return order[g] })
	}
	s.parallel(len(order), func(g int) {
		t := order[g]
		s.readCollection(ctx, t, addrs, groups[t], out)
	})
	return out
}

// idsFilter returns the filter {_id: {$in: ids}}.
func idsFilter(ids *bsoncore.ArrayBuilder) bson.Raw {
	return bson.Raw(bsoncore.NewDocumentBuilder().
		AppendDocument(idKey, bsoncore.NewDocumentBuilder().AppendArray("$in", ids.Build()).Build()).
		Build())
}

func (s *Store) readCollection(ctx context.Context, t target, addrs []domain.Address, idx []int, out []ports.ReadResult) {
	ids := bsoncore.NewArrayBuilder()
	want := make(map[string][]int, len(idx))
	for _, i := range idx {
		k := keyID(addrs[i].Key)
		if _, dup := want[k]; !dup {
			v, _ := keyValue(addrs[i].Key)
			ids.AppendValue(v)
		}
		want[k] = append(want[k], i)
	}
	fail := func(err error) {
		e := classifyRead(fmt.Errorf("cannot read from %s: %w", t, err))
		for _, i := range idx {
			out[i] = ports.ReadResult{Err: e}
		}
	}
	cur, err := s.collection(t).Find(ctx, idsFilter(ids))
	if err != nil {
		fail(err)
		return
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	for cur.Next(ctx) {
		raw := cur.Current
		idv, err := bsoncore.Document(raw).LookupErr(idKey)
		if err != nil {
			continue
		}
		id, ok := idOf(idv)
		if !ok {
			continue
		}
		targets, ok := want[id]
		if !ok {
			continue
		}
		rec, derr := s.enc.clientRecord(raw)
		for k, i := range targets {
			if derr != nil {
				out[i] = ports.ReadResult{Err: domain.Errorf(domain.CodeInternal, "cannot read %s: %v", addrs[i], derr)}
				continue
			}
			r := rec
			if k > 0 {
				r.Document.Data = append([]byte(nil), rec.Document.Data...)
				r.Mark.Recent = append([]domain.AppliedEntry(nil), rec.Mark.Recent...)
			}
			out[i] = ports.ReadResult{Found: true, Record: r}
		}
		delete(want, id)
	}
	if err := cur.Err(); err != nil {
		fail(err)
	}
}

// parallel runs fn(0..n-1) with at most MaxConcurrency running at once.
func (s *Store) parallel(n int, fn func(i int)) { parallel(s.limit, n, fn) }

// parallel runs fn(0..n-1) with at most limit running at once and returns
// when all have returned. It never stops early: every fn runs, so each fills
// in its own results (a cancelled context reaches them through their own
// calls).
func parallel(limit, n int, fn func(i int)) {
	if n == 1 || limit == 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var g errgroup.Group
	g.SetLimit(limit)
	for i := range n {
		g.Go(func() error {
			fn(i)
			return nil
		})
	}
	_ = g.Wait()
}

// Shared, immutable option builders.
var (
	unorderedBulk = options.BulkWrite().SetOrdered(false)
	upsert        = options.Replace().SetUpsert(true)
	upsertUpdate  = options.UpdateOne().SetUpsert(true)
)
