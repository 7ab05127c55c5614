package application_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// scanStore returns a memory store holding n JSON records k000.. in n/d,
// each {"i": i, "even": i%2 == 0}.
func scanStore(t *testing.T, n int) *memory.Store {
	t.Helper()
	return scanStoreNamed(t, application.DefaultConfig().Store, n)
}

// scanStoreNamed is scanStore serving store name.
func scanStoreNamed(t *testing.T, name string, n int) *memory.Store {
	t.Helper()
	st := memory.New()
	var ops []ports.WriteOp
	for i := range n {
		ops = append(ops, ports.WriteOp{Kind: ports.WritePut, Address: domain.Address{Store: name, Namespace: "n", Dataset: "d", Key: domain.StringKey(fmt.Sprintf("k%03d", i))},
			Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: fmt.Appendf(nil, `{"i":%d,"even":%v}`, i, i%2 == 0)}})
	}
	for _, r := range st.Write(context.Background(), ops) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	return st
}

func scanSpec() domain.ScanSpec {
	return domain.ScanSpec{Dataset: domain.DatasetRef{Namespace: "n", Dataset: "d"}}
}

// scanAllPages pages through req and returns the keys and the pages.
func scanAllPages(t *testing.T, ctx context.Context, s *application.Service, req application.ScanRequest) ([]string, []application.ScanPage) {
	t.Helper()
	var keys []string
	var pages []application.ScanPage
	for range 1000 {
		p, err := s.Scan(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, p)
		for _, r := range p.Records {
			keys = append(keys, r.Key.StringValue())
		}
		if len(p.Cursor) == 0 {
			return keys, pages
		}
		req.Cursor = p.Cursor
	}
	t.Fatal("the scan does not end")
	return nil, nil
}

// A selective filter: pages are bounded by the records they scan, every
// page makes progress (some return nothing), and the matches come back
// once each, in order.
func TestScanBoundsScannedRecordsPerPage(t *testing.T) {
	s, err := application.NewService(scanConfig(func(l *application.ScanLimits) { l.MaxScannedPerPage = 7 }), scanStore(t, 40), nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := scanSpec()
	spec.Filter = &domain.Filter{Op: domain.FilterIn, Path: []string{"i"}, Values: []domain.Value{domain.IntValue(3), domain.IntValue(4), domain.IntValue(30)}}
	keys, pages := scanAllPages(t, context.Background(), s, application.ScanRequest{Spec: spec, PageSize: 2})
	if strings.Join(keys, ",") != "k003,k004,k030" {
		t.Fatalf("keys %v", keys)
	}
	scanned, empty := 0, 0
	for _, p := range pages {
		if p.Scanned > 7 || p.Returned != len(p.Records) {
			t.Fatalf("page scanned %d, returned %d of %d records", p.Scanned, p.Returned, len(p.Records))
		}
		scanned += p.Scanned
		if p.Returned == 0 {
			empty++
		}
	}
	if scanned != 40 || empty == 0 {
		t.Fatalf("scanned %d records in all (want each of the 40 once), %d empty pages", scanned, empty)
	}
}

func TestScanProjectionAndDescending(t *testing.T) {
	s, err := application.NewService(application.DefaultConfig(), scanStore(t, 5), nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := scanSpec()
	spec.Descending = true
	spec.Projection = domain.Projection{Fields: []string{"even"}, Exclude: true}
	p, err := s.Scan(context.Background(), &application.ScanRequest{Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) != 5 || p.Records[0].Key.StringValue() != "k004" || string(p.Records[0].Document.Data) != `{"i":4}` || len(p.Cursor) != 0 {
		t.Fatalf("page %+v", p)
	}
}

func TestScanRequestChecks(t *testing.T) {
	s, err := application.NewService(application.DefaultConfig(), scanStore(t, 5), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := s.Scan(ctx, &application.ScanRequest{Spec: scanSpec(), PageSize: 2})
	if err != nil || len(first.Cursor) == 0 {
		t.Fatalf("first page: %+v %v", first, err)
	}
	bad := func(name string, req application.ScanRequest, want string) {
		t.Helper()
		_, err := s.Scan(ctx, &req)
		if domain.CodeOf(err) != domain.CodeInvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT with %q", name, err, want)
		}
	}
	other := scanSpec()
	other.Dataset.Dataset = "e"
	bad("cursor of another dataset", application.ScanRequest{Spec: other, Cursor: first.Cursor}, "another request")
	desc := scanSpec()
	desc.Descending = true
	bad("cursor of another order", application.ScanRequest{Spec: desc, Cursor: first.Cursor}, "another request")
	bad("page size", application.ScanRequest{Spec: scanSpec(), PageSize: 1001}, "page_size")
	f := scanSpec()
	f.Filter = &domain.Filter{Op: domain.FilterOr, Children: []*domain.Filter{{Op: domain.FilterExists, Path: []string{"a", "0"}}}}
	bad("filter", application.ScanRequest{Spec: f}, "filter.or[0].exists")
	nameless := scanSpec()
	nameless.Dataset.Namespace = ""
	bad("namespace", application.ScanRequest{Spec: nameless}, "dataset.namespace")
	// The cursor of a page resumes after it.
	rest, err := s.Scan(ctx, &application.ScanRequest{Spec: scanSpec(), Cursor: first.Cursor})
	if err != nil || len(rest.Records) != 3 || rest.Records[0].Key.StringValue() != "k002" {
		t.Fatalf("resumed: %+v %v", rest, err)
	}
}

func TestScanAuthorizationEveryCall(t *testing.T) {
	s, err := application.NewService(application.DefaultConfig(), scanStore(t, 5), nil, application.RequirePrincipal())
	if err != nil {
		t.Fatal(err)
	}
	reader := domain.WithPrincipal(context.Background(), &domain.Principal{Name: "reader",
		Grants: []domain.Grant{{Store: "*", Namespace: "n", Dataset: "d", Rights: domain.RightRead}}})
	writer := domain.WithPrincipal(context.Background(), &domain.Principal{Name: "writer",
		Grants: []domain.Grant{{Store: "*", Namespace: "n", Dataset: "d", Rights: domain.RightWrite}}})
	p, err := s.Scan(reader, &application.ScanRequest{Spec: scanSpec(), PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Scan(writer, &application.ScanRequest{Spec: scanSpec(), Cursor: p.Cursor}); domain.CodeOf(err) != domain.CodePermissionDenied {
		t.Fatalf("a cursor carries no rights: %v", err)
	}
	if _, err := s.Scan(context.Background(), &application.ScanRequest{Spec: scanSpec()}); domain.CodeOf(err) != domain.CodeUnauthenticated {
		t.Fatalf("no principal: %v", err)
	}
	if _, err := s.Count(writer, &application.CountRequest{Spec: scanSpec()}); domain.CodeOf(err) != domain.CodePermissionDenied {
		t.Fatalf("count without the read right: %v", err)
	}
}

func TestScanAdmissionCountsScannedRecords(t *testing.T) {
	adm := &fakeAdmission{}
	s, err := application.NewService(application.DefaultConfig(), scanStore(t, 30), nil, application.WithAdmission(adm))
	if err != nil {
		t.Fatal(err)
	}
	spec := scanSpec()
	spec.Filter = &domain.Filter{Op: domain.FilterEq, Path: []string{"even"}, Value: domain.BoolValue(true)}
	_, pages := scanAllPages(t, context.Background(), s, application.ScanRequest{Spec: spec, PageSize: 4})
	scanned, admitted := 0, 0
	for _, p := range pages {
		scanned += p.Scanned
	}
	for _, r := range adm.got {
		admitted += r.Operations
	}
	if scanned != 30 || admitted < scanned {
		t.Fatalf("scanned %d records, admission was asked for %d", scanned, admitted)
	}
	adm.reject = domain.Errorf(domain.CodeResourceExhausted, "slow down")
	if _, err := s.Scan(context.Background(), &application.ScanRequest{Spec: spec}); domain.CodeOf(err) != domain.CodeResourceExhausted {
		t.Fatalf("rejected admission: %v", err)
	}
}

// blockingScanner answers its first Scan from the store and blocks every
// later one until its context ends.
type blockingScanner struct {
	*memory.Store
	calls int
}

func (b *blockingScanner) Scan(ctx context.Context, q ports.ScanQuery) (ports.ScanResult, error) {
	b.calls++
	if b.calls == 1 {
		q.Limit = 2
		r, err := b.Store.Scan(ctx, q)
		r.Done = false
		return r, err
	}
	<-ctx.Done()
	return ports.ScanResult{}, ctx.Err()
}

func TestScanPageTimeBudgetAndCancellation(t *testing.T) {
	bs := &blockingScanner{Store: scanStore(t, 10)}
	s, err := application.NewService(scanConfig(func(l *application.ScanLimits) { l.PageTime = 50 * time.Millisecond }), bs, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The budget ends the page with what it has, and a cursor.
	p, err := s.Scan(context.Background(), &application.ScanRequest{Spec: scanSpec(), PageSize: 5})
	if err != nil || len(p.Records) != 2 || len(p.Cursor) == 0 {
		t.Fatalf("page: %+v %v", p, err)
	}
	// A page that scanned nothing within its budget fails, retryably.
	_, err = s.Scan(context.Background(), &application.ScanRequest{Spec: scanSpec(), Cursor: p.Cursor})
	if domain.CodeOf(err) != domain.CodeUnavailable {
		t.Fatalf("empty page past its budget: %v", err)
	}
	// The caller's cancellation ends a scan mid-storage-read.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Scan(ctx, &application.ScanRequest{Spec: scanSpec(), Cursor: p.Cursor})
		done <- err
	}()
	cancel()
	if err := <-done; domain.CodeOf(err) != domain.CodeCanceled && !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled scan: %v", err)
	}
}

// storageOnly hides the memory store's Scanner.
type storageOnly struct{ ports.Storage }

func TestScanNeedsAScanner(t *testing.T) {
	s, err := application.NewService(application.DefaultConfig(), storageOnly{memory.New()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Scan(context.Background(), &application.ScanRequest{Spec: scanSpec()}); domain.CodeOf(err) != domain.CodeFailedPrecondition {
		t.Fatalf("scan of a store without scan support: %v", err)
	}
}

// Among several stores, a scan or count goes to the dataset's store; a
// store whose adapter cannot scan answers FAILED_PRECONDITION naming it,
// and the others still scan.
func TestScanRoutesByStore(t *testing.T) {
	s, err := application.NewService(application.DefaultConfig(), scanStore(t, 5), nil,
		application.WithStores(map[string]ports.Storage{"plain": storageOnly{scanStoreNamed(t, "plain", 3)}, "other": scanStoreNamed(t, "other", 2)}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for store, want := range map[string]int{"": 5, "other": 2} {
		spec := scanSpec()
		spec.Dataset.Store = store
		if keys, _ := scanAllPages(t, ctx, s, application.ScanRequest{Spec: spec}); len(keys) != want {
			t.Fatalf("scan of store %q: %v, want %d keys", store, keys, want)
		}
		if c, err := s.Count(ctx, &application.CountRequest{Spec: spec}); err != nil || c.Count != int64(want) {
			t.Fatalf("count of store %q: %+v, %v", store, c, err)
		}
	}
	spec := scanSpec()
	spec.Dataset.Store = "plain"
	if _, err := s.Scan(ctx, &application.ScanRequest{Spec: spec}); domain.CodeOf(err) != domain.CodeFailedPrecondition || !strings.Contains(err.Error(), `"plain"`) {
		t.Fatalf("scan of a store without scan support: %v", err)
	}
	if _, err := s.Count(ctx, &application.CountRequest{Spec: spec}); domain.CodeOf(err) != domain.CodeFailedPrecondition {
		t.Fatalf("count of a store without scan support: %v", err)
	}
}

func TestCount(t *testing.T) {
	s, err := application.NewService(application.DefaultConfig(), scanStore(t, 25), nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := scanSpec()
	if c, err := s.Count(context.Background(), &application.CountRequest{Spec: spec}); err != nil || c.Count != 25 || !c.Exact {
		t.Fatalf("count: %+v %v", c, err)
	}
	spec.Filter = &domain.Filter{Op: domain.FilterGte, Path: []string{"i"}, Value: domain.IntValue(20)}
	if c, err := s.Count(context.Background(), &application.CountRequest{Spec: spec}); err != nil || c.Count != 5 || !c.Exact {
		t.Fatalf("count with a filter: %+v %v", c, err)
	}
	small, err := application.NewService(scanConfig(func(l *application.ScanLimits) { l.MaxCountScanned = 10 }), scanStore(t, 25), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.Count(context.Background(), &application.CountRequest{Spec: spec}); domain.CodeOf(err) != domain.CodeResourceExhausted {
		t.Fatalf("count past its scan limit: %v", err)
	}
}

func TestScanPageBytesAreBounded(t *testing.T) {
	st := memory.New()
	big := strings.Repeat("x", 300_000)
	for i := range 10 {
		a := domain.Address{Store: application.DefaultConfig().Store, Namespace: "n", Dataset: "d", Key: domain.Int64Key(int64(i))}
		if r := st.Write(context.Background(), []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: domain.Document{ContentType: domain.ContentTypeJSON, Data: fmt.Appendf(nil, `{"s":%q}`, big)}}})[0]; r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	s, err := application.NewService(application.DefaultConfig(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, pages := scanAllPages(t, context.Background(), s, application.ScanRequest{Spec: scanSpec(), PageSize: 100})
	total := 0
	for _, p := range pages {
		size := 0
		for _, r := range p.Records {
			size += len(r.Document.Data)
		}
		if size-len(p.Records[len(p.Records)-1].Document.Data) >= domain.MaxScanPageBytes {
			t.Fatalf("a page of %d records holds %d bytes", len(p.Records), size)
		}
		total += len(p.Records)
	}
	if len(pages) < 2 || total != 10 {
		t.Fatalf("%d pages, %d records", len(pages), total)
	}
}

// scanConfig returns the default configuration with its scan limits
// changed by set.
func scanConfig(set func(*application.ScanLimits)) application.Config {
	cfg := application.DefaultConfig()
	set(&cfg.Scan)
	return cfg
}
