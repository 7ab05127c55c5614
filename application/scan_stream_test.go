package application_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// streamingStore streams scans over a memory store: each stream reads in
// batches (batch records per query, resuming after its last key), and
// failNext makes the stream's next read fail once.
type streamingStore struct {
	*memory.Store
	batch    int
	opened   int
	reads    int
	failNext bool
}

func (s *streamingStore) OpenScan(ctx context.Context, q ports.ScanQuery) (ports.ScanStream, error) {
	s.opened++
	return &memStream{s: s, q: q}, nil
}

type memStream struct {
	s      *streamingStore
	q      ports.ScanQuery
	buf    []ports.ScanItem
	done   bool
	closed bool
}

func (m *memStream) Next(ctx context.Context, n int) (ports.ScanResult, error) {
	if m.closed {
		return ports.ScanResult{}, errors.New("read after close")
	}
	m.s.reads++
	if m.s.failNext {
		m.s.failNext = false
		return ports.ScanResult{}, domain.Errorf(domain.CodeUnavailable, "cursor lost")
	}
	for len(m.buf) < n && !m.done {
		q := m.q
		q.Limit = m.s.batch
		r, err := m.s.Store.Scan(ctx, q)
		if err != nil {
			return ports.ScanResult{}, err
		}
		if len(r.Items) > 0 {
			k := r.Items[len(r.Items)-1].Key
			m.q.After = &k
		}
		m.buf, m.done = append(m.buf, r.Items...), r.Done
	}
	items := m.buf[:min(n, len(m.buf))]
	m.buf = m.buf[len(items):]
	return ports.ScanResult{Items: items, Done: m.done && len(m.buf) == 0}, nil
}

func (m *memStream) Close() { m.closed = true }

// ScanPages reads every page of a streaming store through one stream;
// records a page read but did not take (its page size, its filter's
// reads) start the next page, none lost or repeated; cursors still
// resume from any page in a new call.
func TestScanPagesShareOneStream(t *testing.T) {
	st := &streamingStore{Store: scanStore(t, 50), batch: 7}
	s, err := application.NewService(application.DefaultConfig(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 50 {
		if i%2 == 0 {
			want = append(want, fmt.Sprintf("k%03d", i))
		}
	}
	spec := scanSpec()
	spec.Filter = &domain.Filter{Op: domain.FilterEq, Path: []string{"even"}, Value: domain.BoolValue(true)}
	var got []string
	var cursors [][]byte
	err = s.ScanPages(t.Context(), &application.ScanRequest{Spec: spec, PageSize: 3}, 0, func(p *application.ScanPage) error {
		for _, r := range p.Records {
			got = append(got, r.Key.StringValue())
		}
		cursors = append(cursors, p.Cursor)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("keys %v, want %v", got, want)
	}
	if st.opened != 1 || len(cursors) < 9 {
		t.Fatalf("%d pages opened %d streams, want one", len(cursors), st.opened)
	}
	// A cursor from the middle resumes in a new call (a new stream) where
	// the page left off.
	mid := len(cursors) / 2
	rest, _ := scanAllPages(t, t.Context(), s, application.ScanRequest{Spec: spec, PageSize: 3, Cursor: cursors[mid-1]})
	if n := len(rest); n == 0 || strings.Join(rest, ",") != strings.Join(want[len(want)-n:], ",") || len(want)-n != 3*mid {
		t.Fatalf("resumed after page %d: %v", mid, rest)
	}
}

// A stream that fails after serving pages (a cursor the server dropped
// while a slow client read) is opened again after the last key taken; one
// that fails at once fails the page.
func TestScanPagesReopenAStreamThatFailsLater(t *testing.T) {
	st := &streamingStore{Store: scanStore(t, 20), batch: 4}
	s, err := application.NewService(application.DefaultConfig(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	pages := 0
	err = s.ScanPages(t.Context(), &application.ScanRequest{Spec: scanSpec(), PageSize: 5}, 0, func(p *application.ScanPage) error {
		pages++
		for _, r := range p.Records {
			got = append(got, r.Key.StringValue())
		}
		if pages == 2 {
			st.failNext = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 20 || got[0] != "k000" || got[19] != "k019" || st.opened != 2 {
		t.Fatalf("keys %v with %d streams opened, want k000..k019 with 2", got, st.opened)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("keys out of order or repeated: %v", got)
		}
	}
	st.failNext = true
	if _, err := s.Scan(t.Context(), &application.ScanRequest{Spec: scanSpec(), PageSize: 5}); domain.CodeOf(err) != domain.CodeUnavailable {
		t.Fatalf("a new stream that fails: %v, want UNAVAILABLE", err)
	}
}

// maxRecords cuts the last page and ends the scan; an error from yield
// ends it too and is returned.
func TestScanPagesLimitAndStop(t *testing.T) {
	s, err := application.NewService(application.DefaultConfig(), &streamingStore{Store: scanStore(t, 20), batch: 6}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	err = s.ScanPages(t.Context(), &application.ScanRequest{Spec: scanSpec(), PageSize: 4}, 10, func(p *application.ScanPage) error {
		sizes = append(sizes, p.Returned)
		return nil
	})
	if err != nil || fmt.Sprint(sizes) != "[4 4 2]" {
		t.Fatalf("page sizes %v, %v; want [4 4 2]", sizes, err)
	}
	stop := errors.New("stop")
	calls := 0
	err = s.ScanPages(t.Context(), &application.ScanRequest{Spec: scanSpec(), PageSize: 4}, 0, func(*application.ScanPage) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("yield's error: %v after %d calls", err, calls)
	}
}

// countingScanner counts the queries of a store without streams and the
// records they asked for.
type countingScanner struct {
	*memory.Store
	queries int
	limits  []int
}

func (c *countingScanner) Scan(ctx context.Context, q ports.ScanQuery) (ports.ScanResult, error) {
	c.queries++
	c.limits = append(c.limits, q.Limit)
	return c.Store.Scan(ctx, q)
}

// A call that reads several pages from a store without streams reads
// ahead after its first query (by the sizes of the records read), and the
// following pages take those records in turn: every key once, in order,
// in a few queries. A call for one page (Scan) never reads ahead.
func TestScanPagesReadAhead(t *testing.T) {
	cs := &countingScanner{Store: scanStore(t, 50)}
	s, err := application.NewService(application.DefaultConfig(), cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	pages := 0
	err = s.ScanPages(t.Context(), &application.ScanRequest{Spec: scanSpec(), PageSize: 3}, 0, func(p *application.ScanPage) error {
		pages++
		for _, r := range p.Records {
			got = append(got, r.Key.StringValue())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range got {
		if want := fmt.Sprintf("k%03d", i); k != want {
			t.Fatalf("keys %v: position %d holds %s, want %s", got, i, k, want)
		}
	}
	if len(got) != 50 || pages != 17 || cs.queries != 2 || cs.limits[1] <= 3 {
		t.Fatalf("%d keys in %d pages with %d queries (limits %v); want 50 in 17 with 2", len(got), pages, cs.queries, cs.limits)
	}
	cs.queries, cs.limits = 0, nil
	p, err := s.Scan(t.Context(), &application.ScanRequest{Spec: scanSpec(), PageSize: 3})
	if err != nil || p.Returned != 3 || fmt.Sprint(cs.limits) != "[3]" {
		t.Fatalf("one page: %d records, queries with limits %v, %v", p.Returned, cs.limits, err)
	}
	// A call with a bound reads no further ahead than the bound.
	cs.queries, cs.limits = 0, nil
	n := 0
	err = s.ScanPages(t.Context(), &application.ScanRequest{Spec: scanSpec(), PageSize: 3}, 7, func(p *application.ScanPage) error {
		n += p.Returned
		return nil
	})
	if err != nil || n != 7 || slices.Max(cs.limits) > 7 {
		t.Fatalf("bounded call: %d records, query limits %v, %v", n, cs.limits, err)
	}
}
