package storagetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// ScanFixtures tell the scan suite (RunScan) how to build what it tests.
type ScanFixtures struct {
	// NewStorage returns a ready storage that implements ports.Scanner.
	NewStorage func(t *testing.T) ports.Storage
	// Store is the store name used in addresses.
	Store string
	// Namespace returns a namespace no other test uses.
	Namespace func(t testing.TB) string
	// Encode returns a document the storage accepts holding the object
	// value v (EncodeBSON or EncodeJSON for most storages).
	Encode func(t testing.TB, v domain.Value) domain.Document
	// KeyKinds lists the key kinds the storage supports (nil: all).
	KeyKinds []domain.KeyKind
	// MaxParallel bounds how many cases run at once (0: no bound).
	MaxParallel int
}

// RunScan runs the scan and count conformance suite of ports.Scanner.
func RunScan(t *testing.T, fx ScanFixtures) {
	if fx.KeyKinds == nil {
		fx.KeyKinds = AllKeyKinds
	}
	tests := []struct {
		name string
		run  func(t *testing.T, h *scanHarness)
	}{
		{"KeyOrderAcrossKinds", testScanKeyOrder},
		{"EveryPageSize", testScanPageSizes},
		{"Ranges", testScanRanges},
		{"Count", testScanCount},
		{"OtherDatasetsNeverAppear", testScanIsolation},
		{"ConcurrentWrites", testScanConcurrentWrites},
		{"FilterNeverDropsAMatch", testScanFilterSuperset},
		{"CanceledContext", testScanCanceled},
	}
	var slots chan struct{}
	if fx.MaxParallel > 0 {
		slots = make(chan struct{}, fx.MaxParallel)
	}
	// A storage that streams scans (ports.ScanStreamer) runs every case
	// twice: with a query per read, and with one stream per scan.
	modes := []string{""}
	if _, ok := fx.NewStorage(t).(ports.ScanStreamer); ok {
		modes = append(modes, "Stream/")
	}
	for _, mode := range modes {
		for _, tc := range tests {
			t.Run(mode+tc.name, func(t *testing.T) {
				t.Parallel()
				if slots != nil {
					slots <- struct{}{}
					defer func() { <-slots }()
				}
				ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
				defer cancel()
				st := fx.NewStorage(t)
				sc, ok := st.(ports.Scanner)
				if !ok {
					t.Fatalf("%T does not implement ports.Scanner", st)
				}
				h := &scanHarness{t: t, s: st, sc: sc, fx: fx, ctx: ctx, ns: fx.Namespace(t)}
				if mode != "" {
					h.stream = st.(ports.ScanStreamer)
				}
				tc.run(t, h)
			})
		}
	}
}

type scanHarness struct {
	t   *testing.T
	s   ports.Storage
	sc  ports.Scanner
	fx  ScanFixtures
	ctx context.Context
	ns  string
	// stream, when set, reads every scan of the case through one stream
	// (ScanAllStream) instead of a query per read (ScanAll).
	stream ports.ScanStreamer
}

func (h *scanHarness) dataset(name string) domain.DatasetRef {
	return domain.DatasetRef{Store: h.fx.Store, Namespace: h.ns, Dataset: name}
}

func (h *scanHarness) supports(k domain.KeyKind) bool { return slices.Contains(h.fx.KeyKinds, k) }

// sampleKeys returns keys of every supported kind, in no particular order.
func (h *scanHarness) sampleKeys() []domain.Key {
	var ks []domain.Key
	if h.supports(domain.KeyObjectID) {
		ks = append(ks, domain.ObjectIDKey([]byte{0x65, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}), domain.ObjectIDKey([]byte{0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}))
	}
	if h.supports(domain.KeyString) {
		for _, s := range []string{"b", "a", "ab", "Z", "é", "zz", "a\u00e9", "aa", "e\u0301", "~"} {
			ks = append(ks, domain.StringKey(s))
		}
	}
	if h.supports(domain.KeyBytes) {
		ks = append(ks, domain.BytesKey([]byte{0xff}), domain.BytesKey([]byte{0, 1}), domain.BytesKey([]byte{0, 0, 0}), domain.BytesKey([]byte{0x7f}))
	}
	if h.supports(domain.KeyInt64) {
		for _, n := range []int64{7, -3, 0, 1 << 40, -(1 << 62), 100} {
			ks = append(ks, domain.Int64Key(n))
		}
	}
	return ks
}

func (h *scanHarness) put(d domain.DatasetRef, k domain.Key, v domain.Value) {
	h.t.Helper()
	a := domain.Address{Store: d.Store, Namespace: d.Namespace, Dataset: d.Dataset, Key: k}
	r := h.s.Write(h.ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: h.fx.Encode(h.t, v)}})[0]
	if r.Err != nil {
		h.t.Fatalf("put %v: %v", a, r.Err)
	}
}

func (h *scanHarness) putKeys(d domain.DatasetRef, ks []domain.Key) {
	h.t.Helper()
	ops := make([]ports.WriteOp, len(ks))
	for i, k := range ks {
		v := domain.Value{Kind: domain.ValueObject, Fields: []domain.Field{{Name: "i", Value: domain.IntValue(int64(i))}}}
		ops[i] = ports.WriteOp{Kind: ports.WritePut, Address: domain.Address{Store: d.Store, Namespace: d.Namespace, Dataset: d.Dataset, Key: k}, Document: h.fx.Encode(h.t, v)}
	}
	for i, r := range h.s.Write(h.ctx, ops) {
		if r.Err != nil {
			h.t.Fatalf("put %v: %v", ops[i].Address, r.Err)
		}
	}
}

// scanAll pages through q (Limit per call) and returns the keys.
func (h *scanHarness) scanAll(q ports.ScanQuery) []domain.Key {
	h.t.Helper()
	keys, _ := h.collect(q, nil)
	return keys
}

// collect reads q to its end as the case's mode does: ScanAll, or
// ScanAllStream.
func (h *scanHarness) collect(q ports.ScanQuery, match func(domain.Document) bool) ([]domain.Key, []domain.Document) {
	h.t.Helper()
	if h.stream != nil {
		return ScanAllStream(h.ctx, h.t, h.stream, q, match)
	}
	return ScanAll(h.ctx, h.t, h.sc, q, match)
}

// ScanAll pages through q with Limit records per call, resuming after the
// last key of each, checks every page (in order, in range, after the
// previous page) and returns the keys and documents, keeping only the
// records match accepts when it is not nil.
func ScanAll(ctx context.Context, t testing.TB, sc ports.Scanner, q ports.ScanQuery, match func(domain.Document) bool) ([]domain.Key, []domain.Document) {
	t.Helper()
	var last *domain.Key
	return collectScan(t, q, match, func() (ports.ScanResult, error) {
		q.After = last
		res, err := sc.Scan(ctx, q)
		if n := len(res.Items); n > 0 {
			last = &res.Items[n-1].Key
		}
		return res, err
	})
}

// ScanAllStream reads q through one stream of st (OpenScan, then Next
// with q.Limit until it is done), checks every read as ScanAll does and
// returns the keys and documents match accepts (all when it is nil).
func ScanAllStream(ctx context.Context, t testing.TB, st ports.ScanStreamer, q ports.ScanQuery, match func(domain.Document) bool) ([]domain.Key, []domain.Document) {
	t.Helper()
	stream, err := st.OpenScan(ctx, q)
	if err != nil {
		t.Fatalf("open scan %+v: %v", q, err)
	}
	defer stream.Close()
	return collectScan(t, q, match, func() (ports.ScanResult, error) { return stream.Next(ctx, q.Limit) })
}

// collectScan calls read until a result is done, checking that each holds
// at most q.Limit records, in order, in q's range and after the one
// before.
func collectScan(t testing.TB, q ports.ScanQuery, match func(domain.Document) bool, read func() (ports.ScanResult, error)) ([]domain.Key, []domain.Document) {
	t.Helper()
	var keys []domain.Key
	var docs []domain.Document
	last := q.After
	for calls := 0; ; calls++ {
		if calls > 100_000 {
			t.Fatalf("scan does not end")
		}
		res, err := read()
		if err != nil {
			t.Fatalf("scan %+v: %v", q, err)
		}
		if len(res.Items) > q.Limit {
			t.Fatalf("scan returned %d records for limit %d", len(res.Items), q.Limit)
		}
		for _, it := range res.Items {
			if !q.Range.Contains(it.Key) {
				t.Fatalf("scan returned key %v outside the range", it.Key)
			}
			if last != nil && !domain.After(it.Key, *last, q.Descending) {
				t.Fatalf("scan returned key %v after %v (descending %v): out of order", it.Key, *last, q.Descending)
			}
			k := it.Key
			last = &k
			if match == nil || match(it.Record.Document) {
				keys = append(keys, it.Key)
				docs = append(docs, it.Record.Document)
			}
		}
		if res.Done {
			return keys, docs
		}
		if len(res.Items) == 0 {
			t.Fatalf("scan returned no record and is not done")
		}
	}
}

// SortedKeys returns a copy of ks in key order (descending: reversed).
func SortedKeys(ks []domain.Key, desc bool) []domain.Key {
	out := slices.Clone(ks)
	slices.SortFunc(out, domain.CompareKeys)
	if desc {
		slices.Reverse(out)
	}
	return out
}

func equalKeys(a, b []domain.Key) bool {
	return slices.EqualFunc(a, b, func(x, y domain.Key) bool { return x.Equal(y) })
}

func testScanKeyOrder(t *testing.T, h *scanHarness) {
	d := h.dataset("order")
	ks := h.sampleKeys()
	h.putKeys(d, ks)
	for _, desc := range []bool{false, true} {
		got := h.scanAll(ports.ScanQuery{Dataset: d, Descending: desc, Limit: 1000})
		if want := SortedKeys(ks, desc); !equalKeys(got, want) {
			t.Fatalf("descending %v: keys %v, want %v", desc, got, want)
		}
	}
}

func testScanPageSizes(t *testing.T, h *scanHarness) {
	d := h.dataset("pages")
	ks := h.sampleKeys()
	h.putKeys(d, ks)
	for _, desc := range []bool{false, true} {
		want := SortedKeys(ks, desc)
		for n := 1; n <= len(ks)+1; n++ {
			if got := h.scanAll(ports.ScanQuery{Dataset: d, Descending: desc, Limit: n}); !equalKeys(got, want) {
				t.Fatalf("page size %d, descending %v: keys %v, want %v", n, desc, got, want)
			}
		}
	}
}

func testScanRanges(t *testing.T, h *scanHarness) {
	d := h.dataset("ranges")
	ks := h.sampleKeys()
	h.putKeys(d, ks)
	sorted := SortedKeys(ks, false)
	var ranges []domain.KeyRange
	// Every pair of stored keys (and some absent ones) as bounds, both ways
	// inclusive and exclusive.
	bounds := append(slices.Clone(sorted), domain.StringKey("aa0"))
	if h.supports(domain.KeyInt64) {
		bounds = append(bounds, domain.Int64Key(50))
	}
	for i, a := range bounds {
		for j, b := range bounds {
			if (i+j)%3 != 0 {
				continue // a third of the pairs keeps the case short
			}
			ranges = append(ranges, domain.KeyRange{Start: &domain.KeyBound{Key: a, Inclusive: i%2 == 0}, End: &domain.KeyBound{Key: b, Inclusive: j%2 == 1}})
		}
		ranges = append(ranges, domain.KeyRange{Start: &domain.KeyBound{Key: a, Inclusive: true}}, domain.KeyRange{End: &domain.KeyBound{Key: a}})
	}
	for _, p := range []string{"a", "", "é", "zzz", "e\u0301"} {
		ranges = append(ranges, domain.KeyRange{Prefix: &p}, domain.KeyRange{Prefix: &p, Start: &domain.KeyBound{Key: domain.StringKey("ab")}})
	}
	for _, r := range ranges {
		for _, desc := range []bool{false, true} {
			var want []domain.Key
			for _, k := range SortedKeys(ks, desc) {
				if r.Contains(k) {
					want = append(want, k)
				}
			}
			got := h.scanAll(ports.ScanQuery{Dataset: d, Range: r, Descending: desc, Limit: 3})
			if !equalKeys(got, want) {
				t.Fatalf("range %s, descending %v: keys %v, want %v", describeRange(r), desc, got, want)
			}
			c, err := h.sc.Count(h.ctx, ports.CountQuery{Dataset: d, Range: r})
			if err != nil || !c.Exact || c.Count != int64(len(want)) {
				t.Fatalf("count of range %s = %+v, %v; want exactly %d", describeRange(r), c, err, len(want))
			}
		}
	}
}

func describeRange(r domain.KeyRange) string {
	s := ""
	if r.Start != nil {
		s += fmt.Sprintf("start %v (inclusive %v) ", r.Start.Key, r.Start.Inclusive)
	}
	if r.End != nil {
		s += fmt.Sprintf("end %v (inclusive %v) ", r.End.Key, r.End.Inclusive)
	}
	if r.Prefix != nil {
		s += fmt.Sprintf("prefix %q", *r.Prefix)
	}
	return s
}

func testScanCount(t *testing.T, h *scanHarness) {
	d := h.dataset("count")
	ks := h.sampleKeys()
	h.putKeys(d, ks)
	c, err := h.sc.Count(h.ctx, ports.CountQuery{Dataset: d})
	if err != nil || !c.Exact || c.Count != int64(len(ks)) {
		t.Fatalf("count = %+v, %v; want exactly %d", c, err, len(ks))
	}
	e, err := h.sc.Count(h.ctx, ports.CountQuery{Dataset: d, Estimate: true})
	if err != nil || (e.Exact && e.Count != int64(len(ks))) {
		t.Fatalf("estimate = %+v, %v; an exact answer must be %d", e, err, len(ks))
	}
	c, err = h.sc.Count(h.ctx, ports.CountQuery{Dataset: h.dataset("empty")})
	if err != nil || c.Count != 0 {
		t.Fatalf("count of an empty dataset = %+v, %v", c, err)
	}
}

func testScanIsolation(t *testing.T, h *scanHarness) {
	d := h.dataset("mine")
	ks := h.sampleKeys()
	h.putKeys(d, ks[:len(ks)/2])
	h.putKeys(h.dataset("mine2"), ks)
	h.putKeys(h.dataset("min"), ks)
	got := h.scanAll(ports.ScanQuery{Dataset: d, Limit: 4})
	if want := SortedKeys(ks[:len(ks)/2], false); !equalKeys(got, want) {
		t.Fatalf("keys %v, want only this dataset's %v", got, want)
	}
}

// testScanConcurrentWrites pages through a dataset while other records are
// created, rewritten and deleted between and around the stable ones: every
// stable record comes back exactly once, and no key twice.
func testScanConcurrentWrites(t *testing.T, h *scanHarness) {
	if !h.supports(domain.KeyString) {
		t.Skip("needs string keys")
	}
	d := h.dataset("concurrent")
	var stable []domain.Key
	for i := range 60 {
		stable = append(stable, domain.StringKey(fmt.Sprintf("k%03d", 2*i)))
	}
	h.putKeys(d, stable)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var churned atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := domain.StringKey(fmt.Sprintf("k%03d", 2*(i%60)+1))
			a := domain.Address{Store: d.Store, Namespace: d.Namespace, Dataset: d.Dataset, Key: k}
			op := ports.WriteOp{Kind: ports.WritePut, Address: a, Document: h.fx.Encode(t, domain.Value{Kind: domain.ValueObject, Fields: []domain.Field{{Name: "i", Value: domain.IntValue(int64(i))}}})}
			if i%3 == 2 {
				op = ports.WriteOp{Kind: ports.WriteDelete, Address: a}
			}
			if r := h.s.Write(h.ctx, []ports.WriteOp{op})[0]; r.Err != nil {
				t.Errorf("churn write: %v", r.Err)
				return
			}
			churned.Add(1)
		}
	}()
	var got []domain.Key
	for _, desc := range []bool{false, true} {
		// Wait for some churn between the passes, so that writes land
		// during the scan.
		for n := churned.Load(); churned.Load() < n+5 && !t.Failed(); {
			if _, err := h.sc.Scan(h.ctx, ports.ScanQuery{Dataset: d, Limit: 1}); err != nil {
				t.Fatal(err)
			}
		}
		got = h.scanAll(ports.ScanQuery{Dataset: d, Descending: desc, Limit: 3})
		seen := map[domain.Key]int{}
		for _, k := range got {
			seen[k]++
			if seen[k] > 1 {
				t.Fatalf("key %v returned twice", k)
			}
		}
		for _, k := range stable {
			if seen[k] != 1 {
				t.Fatalf("stable key %v returned %d times", k, seen[k])
			}
		}
	}
	close(stop)
	wg.Wait()
}

// testScanFilterSuperset: whatever part of a filter an adapter evaluates
// natively, it never leaves out a record that the reference semantics
// (Filter.Match) accept.
func testScanFilterSuperset(t *testing.T, h *scanHarness) {
	d := h.dataset("filters")
	r := NewRand(7)
	docs := map[domain.Key]domain.Value{}
	var ks []domain.Key
	for i := range 80 {
		k := domain.Int64Key(int64(i))
		if h.supports(domain.KeyString) && i%2 == 0 {
			k = domain.StringKey(fmt.Sprintf("s%02d", i))
		}
		v := RandomDocument(r)
		docs[k] = v
		ks = append(ks, k)
		h.put(d, k, v)
	}
	for range 150 {
		f := RandomFilter(r)
		if err := domain.ValidateFilter(f, "filter"); err != nil {
			t.Fatalf("generated an invalid filter: %v", err)
		}
		var want []domain.Key
		for _, k := range SortedKeys(ks, false) {
			v := docs[k]
			if f.Match(&v) {
				want = append(want, k)
			}
		}
		got, _ := h.collect(ports.ScanQuery{Dataset: d, Filter: f, Limit: 25}, matcher(t, f))
		if !equalKeys(got, want) {
			t.Fatalf("filter %s: keys %v, want %v", FormatFilter(f), got, want)
		}
	}
}

func matcher(t testing.TB, f *domain.Filter) func(domain.Document) bool {
	return func(d domain.Document) bool {
		v, err := domain.DecodeDocument(d)
		if err != nil {
			t.Fatalf("scan returned a document that does not decode: %v", err)
		}
		return f.Match(&v)
	}
}

func testScanCanceled(t *testing.T, h *scanHarness) {
	d := h.dataset("canceled")
	h.putKeys(d, h.sampleKeys())
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	if _, err := h.sc.Scan(ctx, ports.ScanQuery{Dataset: d, Limit: 10}); err == nil {
		t.Fatal("scan with a canceled context succeeded")
	}
	if h.stream == nil {
		return
	}
	// A stream honours the context of each read.
	stream, err := h.stream.OpenScan(h.ctx, ports.ScanQuery{Dataset: d, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if _, err := stream.Next(h.ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Next(ctx, 10_000); err == nil {
		t.Fatal("a stream's read with a canceled context succeeded")
	}
}
