package application

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// ScanLimits bound the work of one Scan page and of one Count.
type ScanLimits struct {
	// PageTime is the time budget of one page: when it runs out the page
	// ends with what it has (and its cursor); a page that scanned nothing
	// in it fails with CodeUnavailable.
	PageTime time.Duration
	// MaxScannedPerPage bounds the records one page reads from storage
	// (what a filter rejects counts too).
	MaxScannedPerPage int
	// CountTime bounds a Count that has to scan (one with a filter).
	CountTime time.Duration
	// MaxCountScanned bounds the records such a Count reads.
	MaxCountScanned int
}

// DefaultScanLimits are the scan limits of DefaultConfig.
func DefaultScanLimits() ScanLimits {
	return ScanLimits{PageTime: 5 * time.Second, MaxScannedPerPage: 10_000, CountTime: 30 * time.Second, MaxCountScanned: 10_000_000}
}

// Validate reports every invalid limit at once.
func (l ScanLimits) Validate() error {
	var errs []error
	if l.PageTime <= 0 {
		errs = append(errs, fmt.Errorf("scan: page time must be positive, got %s", l.PageTime))
	}
	if l.MaxScannedPerPage < 1 {
		errs = append(errs, fmt.Errorf("scan: max scanned per page must be at least 1, got %d", l.MaxScannedPerPage))
	}
	if l.CountTime <= 0 {
		errs = append(errs, fmt.Errorf("count: time must be positive, got %s", l.CountTime))
	}
	if l.MaxCountScanned < 1 {
		errs = append(errs, fmt.Errorf("count: max scanned must be at least 1, got %d", l.MaxCountScanned))
	}
	return errors.Join(errs...)
}

// ScanRequest asks for one page of a scan.
type ScanRequest struct {
	// Spec: the dataset (an empty store means the default store), range,
	// filter, order and projection. The cursor is bound to all of them.
	Spec domain.ScanSpec
	// PageSize: records per page (0: domain.DefaultScanPageSize; at most
	// domain.MaxScanPageSize).
	PageSize int
	// Cursor resumes the scan after the page that returned it (empty:
	// from the start of the range).
	Cursor []byte
}

// ScanRecord is one record of a page.
type ScanRecord struct {
	Key      domain.Key
	Document domain.Document
	Revision domain.Revision
}

// ScanPage is one page of a scan. Cursor is empty when the scan is
// complete; otherwise it resumes after the last record scanned (which
// may be past the last record returned, or a page may return none when
// the filter rejected every record it scanned).
type ScanPage struct {
	Records  []ScanRecord
	Cursor   []byte
	Scanned  int
	Returned int
}

// CountRequest asks how many records match a dataset, range and filter.
type CountRequest struct {
	Spec     domain.ScanSpec // Descending and Projection are ignored
	Estimate bool
}

// CountResult is a count, exact unless Exact is false (only when the
// request allowed an estimate).
type CountResult struct {
	Count int64
	Exact bool
}

// scanner returns the scan capability of the dataset's store after
// validating and authorizing the request's spec (normalizing its store).
func (s *Service) prepareScan(ctx context.Context, spec *domain.ScanSpec) (ports.Scanner, error) {
	if err := s.checkCaller(ctx); err != nil {
		return nil, err
	}
	if err := s.checkDeadline(ctx); err != nil {
		return nil, err
	}
	a := domain.Address{Store: spec.Dataset.Store, Namespace: spec.Dataset.Namespace, Dataset: spec.Dataset.Dataset}
	if err := s.checkDataset(&a); err != nil {
		return nil, err
	}
	spec.Dataset = a.DatasetRef()
	if p, ok := domain.PrincipalFrom(ctx); ok && !p.Allows(spec.Dataset, domain.RightFor(0)) {
		return nil, domain.Errorf(domain.CodePermissionDenied, "principal %q has no %s right on %s", p.Name, domain.RightFor(0), spec.Dataset)
	}
	if err := s.checkRange(spec.Range); err != nil {
		return nil, err
	}
	if spec.Filter != nil {
		if ferr := domain.ValidateFilter(spec.Filter, "filter"); ferr != nil {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "invalid filter at %s: %s", ferr.Node, ferr.Message)
		}
	}
	if n := len(spec.Projection.Fields); n > domain.MaxProjectionFields {
		return nil, domain.Errorf(domain.CodeInvalidArgument, "projection names %d fields; the limit is %d", n, domain.MaxProjectionFields)
	}
	for i, f := range spec.Projection.Fields {
		if f == "" || len(f) > s.cfg.Limits.MaxKeyBytes || !utf8.ValidString(f) {
			return nil, domain.Errorf(domain.CodeInvalidArgument, "projection field %d must be a non-empty UTF-8 field name of at most %d bytes", i, s.cfg.Limits.MaxKeyBytes)
		}
	}
	var st ports.Storage = s.storage
	if s.stores != nil {
		st = s.stores.byName[spec.Dataset.Store]
	}
	sc, ok := st.(ports.Scanner)
	if !ok {
		return nil, domain.Errorf(domain.CodeFailedPrecondition, "store %q cannot scan or count records (its storage adapter has no scan support)", spec.Dataset.Store)
	}
	return sc, nil
}

// checkDataset validates and normalizes the dataset part of a.
func (s *Service) checkDataset(a *domain.Address) error {
	a.Key = domain.Int64Key(0)
	ref := opRef{index: -1}
	if err := s.normalizeAddress(ref, a); err != nil {
		// The messages name the field ("address.namespace: ..."); a scan
		// has no operations, so drop the operation part.
		msg := err.Message
		if i := strings.Index(msg, "address."); i >= 0 {
			msg = msg[i:]
		}
		return &domain.Error{Code: err.Code, Message: strings.Replace(msg, "address.", "dataset.", 1)}
	}
	return nil
}

func (s *Service) checkRange(r domain.KeyRange) error {
	for name, b := range map[string]*domain.KeyBound{"range.start": r.Start, "range.end": r.End} {
		if b == nil {
			continue
		}
		if err := s.checkKey(name, b.Key); err != nil {
			return err
		}
	}
	if r.Prefix != nil {
		if len(*r.Prefix) > s.cfg.Limits.MaxKeyBytes || !utf8.ValidString(*r.Prefix) {
			return domain.Errorf(domain.CodeInvalidArgument, "range.prefix must be valid UTF-8 of at most %d bytes", s.cfg.Limits.MaxKeyBytes)
		}
	}
	return nil
}

func (s *Service) checkKey(field string, k domain.Key) error {
	switch k.Kind {
	case domain.KeyString:
		if !utf8.ValidString(k.StringValue()) || len(k.StringValue()) > s.cfg.Limits.MaxKeyBytes {
			return domain.Errorf(domain.CodeInvalidArgument, "%s: a string key must be valid UTF-8 of at most %d bytes", field, s.cfg.Limits.MaxKeyBytes)
		}
	case domain.KeyBytes:
		if k.Size() > s.cfg.Limits.MaxKeyBytes {
			return domain.Errorf(domain.CodeInvalidArgument, "%s: a bytes key must be at most %d bytes", field, s.cfg.Limits.MaxKeyBytes)
		}
	case domain.KeyObjectID:
		if k.Size() != domain.ObjectIDLength {
			return domain.Errorf(domain.CodeInvalidArgument, "%s: an object_id key must be exactly %d bytes", field, domain.ObjectIDLength)
		}
	case domain.KeyInt64:
	default:
		return domain.Errorf(domain.CodeInvalidArgument, "%s: set a key", field)
	}
	return nil
}

// Scan returns one page of a scan (docs/query.md). Authorization (the
// read right on the dataset) is checked on every call: a cursor carries
// no rights, and it only resumes the request it was issued for (its key
// is checked against the request's range, so it cannot reach another
// dataset). Admission is asked before every storage read, for the number
// of records that read may scan.
func (s *Service) Scan(ctx context.Context, req *ScanRequest) (ScanPage, error) {
	var out ScanPage
	err := s.scanPages(ctx, req, 0, false, func(p *ScanPage) error {
		out = *p
		return errStopPages
	})
	if err != nil && !errors.Is(err, errStopPages) {
		return ScanPage{}, err
	}
	return out, nil
}

// errStopPages ends ScanPages after Scan's one page.
var errStopPages = errors.New("one page")

// ScanPages runs a scan page after page, as Scan would for each page's
// cursor, and calls yield with each page until the scan is complete,
// maxRecords records have been returned (0: no bound; the last page is cut
// to fit) or yield returns an error, which ScanPages returns. Every page is
// checked and admitted as in Scan; the pages share one storage stream
// where the store has one (ports.ScanStreamer), so the range is read once,
// not queried again per page. A page yield receives is its own until
// yield returns.
func (s *Service) ScanPages(ctx context.Context, req *ScanRequest, maxRecords int, yield func(*ScanPage) error) error {
	return s.scanPages(ctx, req, maxRecords, true, yield)
}

// Read-ahead of a call that reads several pages (or a filtered Count) from
// a store without streams: after its first query, each query runs in the
// background while the caller takes the records read before, for up to
// this many records, and up to about this many bytes of them by the sizes
// read so far; the pages that follow take them in turn.
const (
	scanAheadRecords = 8192
	scanAheadBytes   = 4 << 20
)

// scanPages is ScanPages; ahead enables read-ahead (for a call that will
// read more than one page).
func (s *Service) scanPages(ctx context.Context, req *ScanRequest, maxRecords int, ahead bool, yield func(*ScanPage) error) error {
	size := req.PageSize
	switch {
	case size == 0:
		size = domain.DefaultScanPageSize
	case size < 0 || size > domain.MaxScanPageSize:
		return domain.Errorf(domain.CodeInvalidArgument, "page_size must be between 1 and %d, got %d", domain.MaxScanPageSize, size)
	}
	var after *domain.Key
	if len(req.Cursor) > 0 {
		// The binding covers the request as sent (store as given).
		k, err := domain.DecodeCursor(&req.Spec, req.Cursor, s.cfg.Limits.MaxKeyBytes)
		if err != nil {
			return domain.Errorf(domain.CodeInvalidArgument, "cursor: %v", err)
		}
		after = &k
	}
	var rd *scanReader
	defer func() {
		if rd != nil {
			rd.close()
		}
	}()
	cursor := req.Cursor
	for sent := 0; ; {
		spec := req.Spec
		sc, err := s.prepareScan(ctx, &spec)
		if err != nil {
			return err
		}
		if rd == nil {
			n := 0
			switch {
			case ahead && maxRecords > 0 && spec.Filter == nil:
				n = min(scanAheadRecords, maxRecords)
			case ahead:
				n = scanAheadRecords
			}
			rd = newScanReader(ctx, sc, ports.ScanQuery{Dataset: spec.Dataset, Range: spec.Range, Descending: spec.Descending, Filter: spec.Filter}, n)
		}
		n := size
		if maxRecords > 0 {
			n = min(n, maxRecords-sent)
		}
		page, last, done, err := s.scanPage(ctx, &spec, rd, after, n)
		if err != nil {
			return err
		}
		switch {
		case done:
		case last != nil:
			page.Cursor = domain.EncodeCursor(&req.Spec, *last)
			after = last
		default:
			page.Cursor = cursor
		}
		if err := yield(&page); err != nil {
			return err
		}
		sent += page.Returned
		if len(page.Cursor) == 0 || (maxRecords > 0 && sent >= maxRecords) {
			return nil
		}
		cursor = page.Cursor
	}
}

// scanPage reads one page of at most size records after after from rd,
// within the page's limits (ScanLimits, domain.MaxScanPageBytes). last is
// the last key it scanned (nil: none), done whether the range is
// exhausted.
func (s *Service) scanPage(ctx context.Context, spec *domain.ScanSpec, rd *scanReader, after *domain.Key, size int) (page ScanPage, last *domain.Key, done bool, err error) {
	lim := s.cfg.Scan
	pageCtx, cancel := context.WithTimeout(ctx, lim.PageTime)
	defer cancel()
	bytes := 0
	last = after
	for !done && page.Returned < size && bytes < domain.MaxScanPageBytes && page.Scanned < lim.MaxScannedPerPage {
		want := size - page.Returned
		if spec.Filter != nil {
			want = max(want, 256)
		}
		want = min(want, lim.MaxScannedPerPage-page.Scanned)
		if err := s.admit(ctx, want, 0); err != nil {
			if page.Scanned > 0 {
				break
			}
			return ScanPage{}, nil, false, err
		}
		res, err := rd.next(pageCtx, last, want)
		if err != nil {
			if ctx.Err() == nil && pageCtx.Err() != nil && page.Scanned > 0 {
				break // the page's time budget ran out: return what it has
			}
			if ctx.Err() == nil && pageCtx.Err() != nil {
				return ScanPage{}, nil, false, domain.Errorf(domain.CodeUnavailable, "the storage returned no record within the page's time budget (%s)", lim.PageTime)
			}
			return ScanPage{}, nil, false, domain.AsError(err)
		}
		if page.Records == nil {
			page.Records = make([]ScanRecord, 0, min(size, max(len(res.Items), 16)))
		}
		consumed := 0
		for i, it := range res.Items {
			if page.Returned >= size || bytes >= domain.MaxScanPageBytes {
				break
			}
			consumed++
			page.Scanned++
			k := it.Key
			last = &res.Items[i].Key // not &k: a copy per record would escape
			if spec.Filter != nil {
				v, err := domain.DecodeDocument(it.Record.Document)
				if err != nil || !spec.Filter.Match(&v) {
					continue
				}
			}
			doc, err := spec.Projection.Project(it.Record.Document)
			if err != nil {
				return ScanPage{}, nil, false, domain.Errorf(domain.CodeInternal, "record %s: cannot project the stored document: %v", k, err)
			}
			page.Records = append(page.Records, ScanRecord{Key: k, Document: doc, Revision: it.Record.Revision})
			page.Returned++
			bytes += len(doc.Data)
		}
		rd.unread(res.Items[consumed:], res.Done)
		done = res.Done && consumed == len(res.Items)
		if pageCtx.Err() != nil {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return ScanPage{}, nil, false, domain.AsError(err)
	}
	if last == after {
		last = nil
	}
	return page, last, done, nil
}

// scanReader reads the records of a scan's pages from its store: with a
// query per read, resuming after the last key scanned, or from one stream
// of the storage for all of them (ports.ScanStreamer). Records a page read
// but did not take wait for the next page.
type scanReader struct {
	sc ports.Scanner
	// q: the scan's dataset, range, order and filter.
	q      ports.ScanQuery
	stream ports.ScanStream
	// pending: records read but not taken, done: the read that returned
	// them reached the end of the range.
	pending []ports.ScanItem
	done    bool
	// ahead: the most records one query may read ahead of a page's need
	// (0: none); read and readBytes: the records queries returned so far
	// and their documents' bytes, which size the read-ahead.
	ahead           int
	read, readBytes int
	// callCtx bounds reads ahead; flight is the one running in the
	// background (nil: none), after the last record pending or taken,
	// so the store works on the next records while the caller sends a
	// page; stopFlight cancels it.
	callCtx    context.Context
	flight     chan aheadRead
	stopFlight context.CancelFunc
}

// newScanReader returns a reader of q's records from sc that reads up to
// ahead records ahead of the pages' need in the background, within ctx
// (0: none), where sc has no streams.
func newScanReader(ctx context.Context, sc ports.Scanner, q ports.ScanQuery, ahead int) *scanReader {
	r := &scanReader{sc: sc, q: q, callCtx: ctx}
	if _, streams := sc.(ports.ScanStreamer); !streams {
		r.ahead = ahead
	}
	return r
}

// aheadRead is the outcome of a read ahead.
type aheadRead struct {
	res ports.ScanResult
	err error
}

// next returns up to n records after after (the last key the scan took).
func (r *scanReader) next(ctx context.Context, after *domain.Key, n int) (ports.ScanResult, error) {
	if len(r.pending) == 0 && r.flight != nil {
		if err := r.land(ctx); err != nil {
			return ports.ScanResult{}, err
		}
	}
	if len(r.pending) > 0 {
		items := r.pending[:min(n, len(r.pending))]
		r.pending = r.pending[len(items):]
		r.launch(items[len(items)-1].Key)
		return ports.ScanResult{Items: items, Done: len(r.pending) == 0 && r.done && r.flight == nil}, nil
	}
	q := r.q
	q.After, q.Limit = after, n
	st, ok := r.sc.(ports.ScanStreamer)
	if !ok {
		res, err := r.sc.Scan(ctx, q)
		if err != nil {
			return ports.ScanResult{}, err
		}
		r.account(res.Items)
		if len(res.Items) > 0 && !res.Done {
			r.done = false
			r.launch(res.Items[len(res.Items)-1].Key)
		}
		return res, nil
	}
	for fresh := r.stream == nil; ; fresh = true {
		if r.stream == nil {
			stream, err := st.OpenScan(ctx, q)
			if err != nil {
				return ports.ScanResult{}, err
			}
			r.stream = stream
		}
		res, err := r.stream.Next(ctx, n)
		if err == nil {
			return res, nil
		}
		// A stream that failed is spent. One that served earlier pages
		// may have failed for its age (a server-side cursor that timed out
		// while a slow client read the last page): it is opened again
		// after the last key taken, once; a new one that fails (the
		// page's time budget, a lost connection) fails the read.
		r.close()
		if fresh || ctx.Err() != nil {
			return ports.ScanResult{}, err
		}
	}
}

// account counts the records a query returned, which size the next read
// ahead.
func (r *scanReader) account(items []ports.ScanItem) {
	for _, it := range items {
		r.read++
		r.readBytes += len(it.Record.Document.Data)
	}
}

// launch starts a read ahead in the background, after the last pending
// record (or after last, the last one taken, when none is pending), when
// the reader reads ahead, none runs and the range has more.
func (r *scanReader) launch(last domain.Key) {
	if r.ahead == 0 || r.flight != nil || r.read == 0 || r.done {
		return
	}
	if len(r.pending) > 0 {
		last = r.pending[len(r.pending)-1].Key
	}
	q := r.q
	// A power of two: stores whose statements carry the limit (a SQL
	// LIMIT) see few distinct ones.
	n := min(r.ahead, max(scanAheadBytes/max(r.readBytes/r.read, 1), 1))
	q.After, q.Limit = &last, 1<<(bits.Len(uint(n))-1)
	ctx, cancel := context.WithCancel(r.callCtx)
	ch := make(chan aheadRead, 1)
	r.flight, r.stopFlight = ch, cancel
	go func() {
		res, err := r.sc.Scan(ctx, q)
		ch <- aheadRead{res, err}
	}()
}

// land waits for the read ahead (while ctx lasts) and makes its records
// pending; its failure is the read's.
func (r *scanReader) land(ctx context.Context) error {
	select {
	case a := <-r.flight:
		r.flight = nil
		r.stopFlight()
		if a.err != nil {
			return a.err
		}
		r.account(a.res.Items)
		r.pending = append(r.pending, a.res.Items...)
		r.done = a.res.Done
		return nil
	case <-ctx.Done():
		return ctx.Err() // the read goes on; the next page takes it
	}
}

// unread puts back records a page read but did not take, before those
// still pending; done tells whether the read that returned them reached
// the end (it matters only when nothing else is pending: otherwise the
// end is where the pending records end).
func (r *scanReader) unread(items []ports.ScanItem, done bool) {
	if len(r.pending) == 0 {
		r.done = done
	}
	if len(items) > 0 {
		r.pending = append(slices.Clip(items), r.pending...)
	}
}

func (r *scanReader) close() {
	if r.flight != nil {
		r.stopFlight()
		<-r.flight
		r.flight = nil
	}
	if r.stream != nil {
		r.stream.Close()
		r.stream = nil
	}
}

// Count counts the records of a dataset in a range that match a filter.
// Without a filter the storage counts (an estimate only when the request
// allows one and the storage has one); with a filter Sink scans the range
// and evaluates it (through one storage stream where the store has one),
// within ScanLimits.CountTime and MaxCountScanned.
func (s *Service) Count(ctx context.Context, req *CountRequest) (CountResult, error) {
	spec := req.Spec
	spec.Descending, spec.Projection = false, domain.Projection{}
	sc, err := s.prepareScan(ctx, &spec)
	if err != nil {
		return CountResult{}, err
	}
	if spec.Filter == nil {
		if err := s.admit(ctx, 1, 0); err != nil {
			return CountResult{}, err
		}
		r, err := sc.Count(ctx, ports.CountQuery{Dataset: spec.Dataset, Range: spec.Range, Estimate: req.Estimate})
		if err != nil {
			return CountResult{}, domain.AsError(err)
		}
		return CountResult{Count: r.Count, Exact: r.Exact || !req.Estimate}, nil
	}
	lim := s.cfg.Scan
	cctx, cancel := context.WithTimeout(ctx, lim.CountTime)
	defer cancel()
	rd := newScanReader(cctx, sc, ports.ScanQuery{Dataset: spec.Dataset, Range: spec.Range, Filter: spec.Filter}, scanAheadRecords)
	defer rd.close()
	var n int64
	scanned := 0
	var after *domain.Key
	for {
		want := min(1000, lim.MaxCountScanned-scanned)
		if want <= 0 {
			return CountResult{}, domain.Errorf(domain.CodeResourceExhausted, "count with a filter scanned %d records, the limit, before reaching the end of the range; narrow the range", scanned)
		}
		if err := s.admit(ctx, want, 0); err != nil {
			return CountResult{}, err
		}
		res, err := rd.next(cctx, after, want)
		if err != nil {
			if ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
				return CountResult{}, domain.Errorf(domain.CodeResourceExhausted, "count with a filter did not finish within its time budget (%s) after scanning %d records; narrow the range", lim.CountTime, scanned)
			}
			return CountResult{}, domain.AsError(err)
		}
		for _, it := range res.Items {
			scanned++
			k := it.Key
			after = &k
			v, err := domain.DecodeDocument(it.Record.Document)
			if err == nil && spec.Filter.Match(&v) {
				n++
			}
		}
		if res.Done {
			return CountResult{Count: n, Exact: true}, nil
		}
	}
}
