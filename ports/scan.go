package ports

import (
	"context"

	"github.com/sink-io/sink/domain"
)

// ScanQuery asks a Scanner for the next records of one dataset in key
// order (domain.CompareKeys), ascending or descending.
type ScanQuery struct {
	Dataset domain.DatasetRef
	// Range restricts the keys (the zero range: every key).
	Range domain.KeyRange
	// After, when set, resumes a scan: only keys strictly after it in the
	// scan direction (strictly before it when Descending). It is always
	// inside Range.
	After      *domain.Key
	Descending bool
	// Filter, when set, is the request's filter (already validated). An
	// adapter may use the parts it can evaluate natively with exactly the
	// domain semantics (Filter.Match) to skip records, or ignore it: the
	// application evaluates the whole filter on every record returned.
	// An adapter must never skip a record that Filter.Match accepts.
	Filter *domain.Filter
	// Limit is the most records to return (at least 1).
	Limit int
}

// ScanItem is one record a scan returned.
type ScanItem struct {
	Key    domain.Key
	Record domain.Record
}

// ScanResult is one batch of a scan: records in key order, every one
// inside the range and after the query's After. Done is true when the
// scan reached the end of the range (the adapter returned fewer than Limit
// records because there were no more).
type ScanResult struct {
	Items []ScanItem
	Done  bool
}

// CountQuery asks how many records of a dataset have a key in Range.
type CountQuery struct {
	Dataset domain.DatasetRef
	Range   domain.KeyRange
	// Estimate allows an estimate (e.g. from collection metadata) instead
	// of an exact count; an adapter may still count exactly.
	Estimate bool
}

// CountResult is a count, exact or an estimate.
type CountResult struct {
	Count int64
	Exact bool
}

// Scanner is the storage capability behind the Scan and Count use cases,
// implemented by a Storage that can list a dataset. Its conformance suite
// is storagetest.RunScan; storagetest.RunDifferential compares an adapter
// with the memory reference on random documents and filters.
//
// Contract:
//   - Records come in the total key order of domain.CompareKeys, the same
//     on every adapter (descending: reversed).
//   - Records are returned as Storage.Read returns them: the client's
//     document without hidden metadata, legacy records (never written by
//     Sink) included. A stored record whose key Sink cannot address (for
//     example a MongoDB _id of another type) is left out.
//   - A scan is not a snapshot: each call reads the records as they are
//     then. Consecutive calls resuming with After never return a key
//     twice, and return every record present and unchanged from the first
//     call to the last exactly once.
//   - Scan honours ctx (cancellation and deadlines) and returns its error
//     (a *domain.Error, or a context error) when the read fails.
type Scanner interface {
	Scan(ctx context.Context, q ScanQuery) (ScanResult, error)
	Count(ctx context.Context, q CountQuery) (CountResult, error)
}

// ScanStreamer is an optional capability of a Scanner: one query of the
// storage (a database cursor) serves the consecutive reads of one scan, so
// a Scan RPC that streams many pages reads its range once instead of
// starting a query per page (which on a server without a usable key index
// reads the whole range again for every page). The application uses it
// within one call only: a cursor that a client keeps between calls is
// still just a key.
//
// Contract, besides the Scanner's for each record: OpenScan starts a scan
// of q (q.Limit is the size of the first read, a hint for the storage's
// batch size, not a limit of the stream). Next returns up to n of the
// following records in key order, none twice; a record present and
// unchanged from OpenScan to the last Next is returned exactly once. ctx
// bounds that call only. After an error the stream is spent; the caller
// closes it and may open another after its last key. Close releases the
// stream and may be called at any time, more than once.
type ScanStreamer interface {
	OpenScan(ctx context.Context, q ScanQuery) (ScanStream, error)
}

// ScanStream is an open scan of a ScanStreamer.
type ScanStream interface {
	Next(ctx context.Context, n int) (ScanResult, error)
	Close()
}
