package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// Completion is when a write returns.
type Completion int32

// Completion modes (see CompletionMode in sink.proto).
const (
	// WaitUntilApplied returns after storage applied the write (the default).
	WaitUntilApplied = Completion(sinkv1.CompletionMode_COMPLETION_MODE_WAIT_UNTIL_APPLIED)
	// ReturnAfterAccepted returns after the durable queue accepted the
	// write; a worker applies it later.
	ReturnAfterAccepted = Completion(sinkv1.CompletionMode_COMPLETION_MODE_RETURN_AFTER_ACCEPTED)
)

// Dataset is a handle on one dataset: store (optional), namespace and
// dataset, with the codec its documents use. It is cheap and safe for
// concurrent use.
type Dataset struct {
	c          *Client
	store      string
	namespace  string
	dataset    string
	codec      Codec
	completion Completion
}

// DatasetOption configures a Dataset.
type DatasetOption func(*Dataset)

// InStore names the store (empty: the served store).
func InStore(store string) DatasetOption { return func(d *Dataset) { d.store = store } }

// WithCodec sets the codec of puts and merge intents (JSON by default).
func WithCodec(codec Codec) DatasetOption { return func(d *Dataset) { d.codec = codec } }

// WithDefaultCompletion sets the completion mode of the dataset's writes
// (WaitUntilApplied by default); WithCompletion overrides it per call.
func WithDefaultCompletion(m Completion) DatasetOption {
	return func(d *Dataset) { d.completion = m }
}

// Dataset returns a handle on namespace/dataset.
func (c *Client) Dataset(namespace, dataset string, opts ...DatasetOption) *Dataset {
	d := &Dataset{c: c, namespace: namespace, dataset: dataset, codec: JSON, completion: WaitUntilApplied}
	for _, o := range opts {
		o(d)
	}
	return d
}

// Codec returns the dataset's codec.
func (d *Dataset) Codec() Codec { return d.codec }

// WriteOption configures one put, merge or delete.
type WriteOption func(*writeOptions)

type writeOptions struct {
	expected   Revision
	key        string
	returnDoc  bool
	completion Completion
	set        bool // completion set
}

// WithExpectedRevision makes the write conditional: the record must exist
// with exactly this revision (else ErrRevisionMismatch or ErrNotFound).
// Merges ignore it (a merge is its own read-modify-write).
func WithExpectedRevision(rev Revision) WriteOption {
	return func(o *writeOptions) { o.expected = rev }
}

// WithIdempotencyKey sets the write's idempotency key (1 to 128 bytes of
// printable ASCII without spaces, unique per intended change of the
// record): the server applies the write at most once, so the client may
// resend it after an unknown outcome.
func WithIdempotencyKey(key string) WriteOption { return func(o *writeOptions) { o.key = key } }

// WithReturnDocument asks the server for the document as written (puts
// and merges, WaitUntilApplied only): for a merge, the record's state right
// after this merge. Decode it with Result.Decode; a retry the server
// answered from the record's remembered idempotency keys carries none
// (Decode then returns ErrNotFound: read the record).
func WithReturnDocument() WriteOption { return func(o *writeOptions) { o.returnDoc = true } }

// WithCompletion sets the write's completion mode.
func WithCompletion(m Completion) WriteOption {
	return func(o *writeOptions) { o.completion, o.set = m, true }
}

// address returns the record address of key.
func (d *Dataset) address(key Key) *sinkv1.RecordAddress {
	return &sinkv1.RecordAddress{Store: d.store, Namespace: d.namespace, Dataset: d.dataset, Key: key.proto()}
}

func (d *Dataset) readOp(key Key) *op {
	return &op{kind: opRead, route: routeHash(d.store, d.namespace, d.dataset, key), size: key.size(),
		read: &sinkv1.ReadOperation{Address: d.address(key)}, codec: d.codec}
}

func (d *Dataset) options(opts []WriteOption) writeOptions {
	var o writeOptions
	for _, f := range opts {
		f(&o)
	}
	if o.key == "" && d.c.cfg.autoKeys {
		o.key = newIdempotencyKey()
	}
	if !o.set {
		o.completion = d.completion
	}
	return o
}

func (d *Dataset) encode(v any) (*sinkv1.Document, error) {
	data, err := d.codec.Marshal(v)
	if err != nil {
		return nil, &OperationError{Code: codes.InvalidArgument, Reason: "INVALID_ARGUMENT", Message: "cannot encode the document: " + err.Error(), cause: err}
	}
	return &sinkv1.Document{ContentType: d.codec.ContentType(), Data: data}, nil
}

func (d *Dataset) putOp(key Key, v any, mode sinkv1.PutMode, o writeOptions) (*op, error) {
	doc, err := d.encode(v)
	if err != nil {
		return nil, err
	}
	return &op{kind: opWrite, route: routeHash(d.store, d.namespace, d.dataset, key), size: key.size() + len(doc.Data), keyed: o.key != "",
		write: &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{
			Address: d.address(key), Document: doc, Mode: mode, ExpectedRevision: o.expected, IdempotencyKey: o.key, ReturnDocument: o.returnDoc,
		}}}, codec: d.codec}, nil
}

func (d *Dataset) mergeOp(key Key, profile string, intent any, o writeOptions) (*op, error) {
	doc, err := d.encode(intent)
	if err != nil {
		return nil, err
	}
	return &op{kind: opWrite, route: routeHash(d.store, d.namespace, d.dataset, key), size: key.size() + len(doc.Data), keyed: o.key != "",
		write: &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{
			Address: d.address(key), Profile: profile, Intent: doc, IdempotencyKey: o.key, ReturnDocument: o.returnDoc,
		}}}, codec: d.codec}, nil
}

func (d *Dataset) deleteOp(key Key, o writeOptions) *op {
	return &op{kind: opDelete, route: routeHash(d.store, d.namespace, d.dataset, key), size: key.size(), keyed: o.key != "",
		del: &sinkv1.DeleteOperation{Address: d.address(key), ExpectedRevision: o.expected, IdempotencyKey: o.key}}
}

// one runs a single operation.
func (d *Dataset) one(ctx context.Context, o *op, completion Completion) Result {
	d.c.run(ctx, []*op{o}, sinkv1.CompletionMode(completion))
	return o.res
}

// Get reads the record of key into v (decoded with the codec of its
// content type) and returns its revision; ErrNotFound when it does not exist.
func (d *Dataset) Get(ctx context.Context, key Key, v any) (Revision, error) {
	r := d.one(ctx, d.readOp(key), 0)
	if r.Err != nil {
		return nil, r.Err
	}
	if r.Status != StatusFound {
		return nil, notFound(fmt.Sprintf("record %s of %s/%s", key, d.namespace, d.dataset))
	}
	if err := r.Decode(v); err != nil {
		return nil, err
	}
	return r.Revision, nil
}

// Put creates or replaces the record of key with v.
func (d *Dataset) Put(ctx context.Context, key Key, v any, opts ...WriteOption) (Result, error) {
	return d.put(ctx, key, v, sinkv1.PutMode_PUT_MODE_UPSERT, opts)
}

// Create writes v under key; the record must not exist (else ErrAlreadyExists).
func (d *Dataset) Create(ctx context.Context, key Key, v any, opts ...WriteOption) (Result, error) {
	return d.put(ctx, key, v, sinkv1.PutMode_PUT_MODE_CREATE, opts)
}

// Replace replaces the record of key with v; it must exist (else ErrNotFound).
func (d *Dataset) Replace(ctx context.Context, key Key, v any, opts ...WriteOption) (Result, error) {
	return d.put(ctx, key, v, sinkv1.PutMode_PUT_MODE_REPLACE, opts)
}

func (d *Dataset) put(ctx context.Context, key Key, v any, mode sinkv1.PutMode, opts []WriteOption) (Result, error) {
	o := d.options(opts)
	w, err := d.putOp(key, v, mode, o)
	if err != nil {
		return Result{Status: StatusFailed, Err: err}, err
	}
	r := d.one(ctx, w, o.completion)
	return r, errOf(r)
}

// Merge runs the named merge profile on the record of key with intent
// (encoded with the dataset's codec): a server-side read-modify-write.
func (d *Dataset) Merge(ctx context.Context, key Key, profile string, intent any, opts ...WriteOption) (Result, error) {
	o := d.options(opts)
	w, err := d.mergeOp(key, profile, intent, o)
	if err != nil {
		return Result{Status: StatusFailed, Err: err}, err
	}
	r := d.one(ctx, w, o.completion)
	return r, errOf(r)
}

// Delete removes the record of key. A missing record is no error:
// the result's Status is StatusNotFound.
func (d *Dataset) Delete(ctx context.Context, key Key, opts ...WriteOption) (Result, error) {
	o := d.options(opts)
	r := d.one(ctx, d.deleteOp(key, o), o.completion)
	return r, errOf(r)
}
