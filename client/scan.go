package client

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"

	"google.golang.org/protobuf/proto"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// ScanOption configures a Scan or a Count.
type ScanOption func(*scanOptions)

type scanOptions struct {
	where    string
	filter   *sinkv1.Filter
	rng      *sinkv1.KeyRange
	desc     bool
	proj     *sinkv1.Projection
	page     uint32
	limit    uint32
	keysOnly bool
	estimate bool
}

// Where selects the records that match a restricted CEL expression over
// the document, such as `doc.total > 10 && doc.status == "paid"`
// (docs/query.md).
func Where(expr string) ScanOption { return func(o *scanOptions) { o.where = expr } }

// WithFilter selects the records that match the typed filter tree (the
// proto form of Where).
func WithFilter(f *sinkv1.Filter) ScanOption { return func(o *scanOptions) { o.filter = f } }

// WithRange limits a scan or count to a key range.
func WithRange(r *sinkv1.KeyRange) ScanOption { return func(o *scanOptions) { o.rng = r } }

// WithPrefix limits a scan or count to the string keys that start with p.
func WithPrefix(p string) ScanOption {
	return func(o *scanOptions) { o.rng = &sinkv1.KeyRange{Prefix: &p} }
}

// Descending scans in descending key order.
func Descending() ScanOption { return func(o *scanOptions) { o.desc = true } }

// WithFields returns only these top-level fields of each document (or all
// but these, with exclude).
func WithFields(exclude bool, fields ...string) ScanOption {
	return func(o *scanOptions) { o.proj = &sinkv1.Projection{Fields: fields, Exclude: exclude} }
}

// WithPageSize sets the records per page the server sends (its default
// and bounds apply).
func WithPageSize(n int) ScanOption { return func(o *scanOptions) { o.page = uint32(max(n, 0)) } }

// WithLimit stops a scan after n records.
func WithLimit(n int) ScanOption { return func(o *scanOptions) { o.limit = uint32(max(n, 0)) } }

// KeysOnly scans keys and revisions without documents.
func KeysOnly() ScanOption { return func(o *scanOptions) { o.keysOnly = true } }

// Estimate lets Count answer with an estimate where the store has one
// (the answer says which it is).
func Estimate() ScanOption { return func(o *scanOptions) { o.estimate = true } }

// Record is one record of a scan.
type Record struct {
	Key      Key
	Revision Revision
	doc      *sinkv1.Document
	codec    Codec
}

// ContentType is the content type of the record's document ("" with
// KeysOnly).
func (r Record) ContentType() string { return r.doc.GetContentType() }

// Decode decodes the record's document into v with the codec of its
// content type.
func (r Record) Decode(v any) error {
	return Result{doc: r.doc, codec: r.codec}.Decode(v)
}

// Scan returns the records of the dataset in key order (see the options),
// page by page, following the server's cursors: a scan that a retryable
// failure interrupts (a server restarting, say) goes on from the last page
// it received, with the client's retry settings. A record present and
// unchanged for the whole scan is returned exactly once; records written
// meanwhile may or may not be. The iteration ends at the first error it
// yields.
func (d *Dataset) Scan(ctx context.Context, opts ...ScanOption) iter.Seq2[Record, error] {
	var o scanOptions
	for _, f := range opts {
		f(&o)
	}
	req := &sinkv1.ScanRequest{
		Dataset: d.ref(), Range: o.rng, Filter: o.filter, Where: o.where, Descending: o.desc,
		Projection: o.proj, PageSize: o.page, Limit: o.limit, KeysOnly: o.keysOnly,
	}
	return func(yield func(Record, error) bool) {
		var cursor []byte
		returned := uint32(0)
		for attempt := 1; ; attempt++ {
			r := proto.CloneOf(req)
			r.Cursor = cursor
			if o.limit > 0 {
				r.Limit = o.limit - returned
			}
			stream, err := d.server().stub.Scan(ctx, r)
			for err == nil {
				var page *sinkv1.ScanPage
				page, err = stream.Recv()
				if err != nil {
					break
				}
				attempt = 1 // progress: a later failure starts its retries afresh
				for _, rec := range page.GetRecords() {
					returned++
					if !yield(Record{Key: keyOf(rec.GetKey()), Revision: rec.GetRevision(), doc: rec.GetDocument(), codec: d.codec}, nil) {
						return
					}
				}
				if c := page.GetCursor(); len(c) > 0 {
					cursor = c
				}
			}
			if errors.Is(err, io.EOF) {
				return
			}
			e := statusError(err)
			if !e.Retryable() || attempt >= d.c.cfg.maxAttempts || (o.limit > 0 && returned >= o.limit) {
				yield(Record{}, e)
				return
			}
			select {
			case <-ctx.Done():
				yield(Record{}, statusError(ctx.Err()))
				return
			case <-time.After(d.c.backoff(attempt)): // the backoff between attempts
			}
		}
	}
}

// Count counts the records of the dataset that match the options (range,
// Where or WithFilter); exact is false only for an estimate (Estimate).
func (d *Dataset) Count(ctx context.Context, opts ...ScanOption) (n uint64, exact bool, err error) {
	var o scanOptions
	for _, f := range opts {
		f(&o)
	}
	req := &sinkv1.CountRequest{Dataset: d.ref(), Range: o.rng, Filter: o.filter, Where: o.where, Estimate: o.estimate}
	for attempt := 1; ; attempt++ {
		resp, err := d.server().stub.Count(ctx, req)
		if err == nil {
			return resp.GetCount(), resp.GetExact(), nil
		}
		e := statusError(err)
		if !e.Retryable() || attempt >= d.c.cfg.maxAttempts {
			return 0, false, e
		}
		select {
		case <-ctx.Done():
			return 0, false, statusError(ctx.Err())
		case <-time.After(d.c.backoff(attempt)): // the backoff between attempts
		}
	}
}

func (d *Dataset) ref() *sinkv1.DatasetRef {
	return &sinkv1.DatasetRef{Store: d.store, Namespace: d.namespace, Dataset: d.dataset}
}

// server is the server for the dataset's scans and counts (the dataset's
// place in the rendezvous hash).
func (d *Dataset) server() *server {
	return d.c.pick(routeHash(d.store, d.namespace, d.dataset, Key{}), time.Now().UnixNano())
}

// keyOf converts a key of the API.
func keyOf(k *sinkv1.RecordKey) Key {
	switch v := k.GetKind().(type) {
	case *sinkv1.RecordKey_String_:
		return StringKey(v.String_)
	case *sinkv1.RecordKey_Int64:
		return Int64Key(v.Int64)
	case *sinkv1.RecordKey_Bytes:
		return BytesKey(v.Bytes)
	case *sinkv1.RecordKey_ObjectId:
		var id [12]byte
		copy(id[:], v.ObjectId)
		return ObjectIDKey(id)
	}
	return Key{}
}
