// Package scanbench holds what the adapters' scan benchmarks share: the
// number of records (SINK_BENCH_SCAN_RECORDS, default 100,000), a 1 KB
// JSON document, and whole scans and counts through the application's use
// cases, so that each adapter's benchmark measures the same work.
package scanbench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
)

// Records returns the number of records a scan benchmark writes:
// SINK_BENCH_SCAN_RECORDS, default 100,000.
func Records(b testing.TB) int {
	b.Helper()
	v := os.Getenv("SINK_BENCH_SCAN_RECORDS")
	if v == "" {
		return 100_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("SINK_BENCH_SCAN_RECORDS=%q: want a positive number", v)
	}
	return n
}

var blob = strings.Repeat("x", 960)

// JSONDoc returns record i's document: about 1 KB of JSON,
// {"n":i,"blob":"xxx…"}.
func JSONDoc(i int) []byte { return fmt.Appendf(nil, `{"n":%d,"blob":%q}`, i, blob) }

// Scan reads spec whole in one call of the application's ScanPages (pages
// of domain.MaxScanPageSize), as the Scan RPC streams them, and returns
// the number of records returned.
func Scan(ctx context.Context, b testing.TB, svc *application.Service, spec domain.ScanSpec) int {
	b.Helper()
	n := 0
	err := svc.ScanPages(ctx, &application.ScanRequest{Spec: spec, PageSize: domain.MaxScanPageSize}, 0, func(p *application.ScanPage) error {
		n += len(p.Records)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// ScanCallPerPage reads spec with one call of the application's Scan per
// page (pages of domain.MaxScanPageSize), each resuming from the cursor of
// the page before, as a client that resumes does, and returns the number
// of records returned.
func ScanCallPerPage(ctx context.Context, b testing.TB, svc *application.Service, spec domain.ScanSpec) int {
	b.Helper()
	n := 0
	req := application.ScanRequest{Spec: spec, PageSize: domain.MaxScanPageSize}
	for {
		p, err := svc.Scan(ctx, &req)
		if err != nil {
			b.Fatal(err)
		}
		n += len(p.Records)
		if len(p.Cursor) == 0 {
			return n
		}
		req.Cursor = p.Cursor
	}
}

// Count counts spec with the application's Count.
func Count(ctx context.Context, b testing.TB, svc *application.Service, spec domain.ScanSpec) int64 {
	b.Helper()
	r, err := svc.Count(ctx, &application.CountRequest{Spec: spec})
	if err != nil {
		b.Fatal(err)
	}
	return r.Count
}

// ReportRate reports n records per iteration as a rate (unit, e.g.
// "records/s").
func ReportRate(b *testing.B, n int, unit string) {
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), unit)
}

// Case is one side of an alternating benchmark.
type Case struct {
	Name string
	// Run does the work once and returns a count that must be Want (the
	// records read or counted).
	Run  func() int
	Want int
}

// Alternate runs the cases in turn in every iteration of b and reports
// each case's milliseconds per run (name-ms), its rate when records is
// set (name-records/s: records per run), and the speed of the first case
// relative to each other (first/other: above 1, the first is faster). On a
// shared, noisy machine, cases measured side by side give ratios that
// hold where separate runs do not.
func Alternate(b *testing.B, records int, cases ...Case) {
	b.Helper()
	took := make([]time.Duration, len(cases))
	iters := 0
	for b.Loop() {
		for i, c := range cases {
			start := time.Now()
			if got := c.Run(); got != c.Want {
				b.Fatalf("%s: %d, want %d", c.Name, got, c.Want)
			}
			took[i] += time.Since(start)
		}
		iters++
	}
	for i, c := range cases {
		per := took[i].Seconds() / float64(iters)
		b.ReportMetric(per*1000, c.Name+"-ms")
		if records > 0 {
			b.ReportMetric(float64(records)/per, c.Name+"-records/s")
		}
		if i > 0 {
			b.ReportMetric(took[i].Seconds()/took[0].Seconds(), cases[0].Name+"/"+c.Name)
		}
	}
	b.ReportMetric(0, "ns/op")
}
