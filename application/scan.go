package application

import (
	"context"
	"errors"
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

// DefaultScanLimits are the scan limits used when none are configured.
func DefaultScanLimits() ScanLimits {
	return ScanLimits{PageTime: 5 * time.Second, MaxScannedPerPage: 10_000, CountTime: 30 * time.Second, MaxCountScanned: 10_000_000}
}

// WithScanLimits sets the scan limits (zero fields keep their defaults).
func WithScanLimits(l ScanLimits) Option {
	return func(s *Service) {
		d := DefaultScanLimits()
		if l.PageTime > 0 {
			d.PageTime = l.PageTime
		}
		if l.MaxScannedPerPage > 0 {
			d.MaxScannedPerPage = l.MaxScannedPerPage
		}
		if l.CountTime > 0 {
			d.CountTime = l.CountTime
		}
		if l.MaxCountScanned > 0 {
			d.MaxCountScanned = l.MaxCountScanned
		}
		s.scanLimits = &d
	}
}

func (s *Service) scanLimitsOrDefault() ScanLimits {
	if s.scanLimits != nil {
		return *s.scanLimits
	}
	return DefaultScanLimits()
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
	spec := req.Spec
	sc, err := s.prepareScan(ctx, &spec)
	if err != nil {
		return ScanPage{}, err
	}
	size := req.PageSize
	switch {
	case size == 0:
		size = domain.DefaultScanPageSize
	case size < 0 || size > domain.MaxScanPageSize:
		return ScanPage{}, domain.Errorf(domain.CodeInvalidArgument, "page_size must be between 1 and %d, got %d", domain.MaxScanPageSize, size)
	}
	var after *domain.Key
	if len(req.Cursor) > 0 {
		// The binding covers the request as sent (store as given).
		k, err := domain.DecodeCursor(&req.Spec, req.Cursor, s.cfg.Limits.MaxKeyBytes)
		if err != nil {
			return ScanPage{}, domain.Errorf(domain.CodeInvalidArgument, "cursor: %v", err)
		}
		after = &k
	}
	lim := s.scanLimitsOrDefault()
	pageCtx, cancel := context.WithTimeout(ctx, lim.PageTime)
	defer cancel()
	var page ScanPage
	bytes := 0
	var last *domain.Key
	done := false
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
			return ScanPage{}, err
		}
		q := ports.ScanQuery{Dataset: spec.Dataset, Range: spec.Range, After: after, Descending: spec.Descending, Filter: spec.Filter, Limit: want}
		if last != nil {
			q.After = last
		}
		res, err := sc.Scan(pageCtx, q)
		if err != nil {
			if ctx.Err() == nil && pageCtx.Err() != nil && page.Scanned > 0 {
				break // the page's time budget ran out: return what it has
			}
			if ctx.Err() == nil && pageCtx.Err() != nil {
				return ScanPage{}, domain.Errorf(domain.CodeUnavailable, "the storage returned no record within the page's time budget (%s)", lim.PageTime)
			}
			return ScanPage{}, domain.AsError(err)
		}
		consumed := 0
		for _, it := range res.Items {
			if page.Returned >= size || bytes >= domain.MaxScanPageBytes {
				break
			}
			consumed++
			page.Scanned++
			k := it.Key
			last = &k
			if spec.Filter != nil {
				v, err := domain.DecodeDocument(it.Record.Document)
				if err != nil || !spec.Filter.Match(&v) {
					continue
				}
			}
			doc, err := spec.Projection.Project(it.Record.Document)
			if err != nil {
				return ScanPage{}, domain.Errorf(domain.CodeInternal, "record %s: cannot project the stored document: %v", k, err)
			}
			page.Records = append(page.Records, ScanRecord{Key: k, Document: doc, Revision: it.Record.Revision})
			page.Returned++
			bytes += len(doc.Data)
		}
		done = res.Done && consumed == len(res.Items)
		if pageCtx.Err() != nil {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return ScanPage{}, domain.AsError(err)
	}
	if !done {
		switch {
		case last != nil:
			page.Cursor = domain.EncodeCursor(&req.Spec, *last)
		default:
			page.Cursor = req.Cursor
		}
	}
	return page, nil
}

// Count counts the records of a dataset in a range that match a filter.
// Without a filter the storage counts (an estimate only when the request
// allows one and the storage has one); with a filter Sink scans the range
// and evaluates it, within ScanLimits.CountTime and MaxCountScanned.
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
	lim := s.scanLimitsOrDefault()
	cctx, cancel := context.WithTimeout(ctx, lim.CountTime)
	defer cancel()
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
		res, err := sc.Scan(cctx, ports.ScanQuery{Dataset: spec.Dataset, Range: spec.Range, After: after, Filter: spec.Filter, Limit: want})
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
