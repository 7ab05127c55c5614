package sinkprom

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

func ds(ns, d string) domain.DatasetRef {
	return domain.DatasetRef{Store: "primary", Namespace: ns, Dataset: d}
}

func TestOperationsAreCountedByBoundedLabels(t *testing.T) {
	m := New(Options{Store: "primary"})
	m.Operations([]ports.OperationOutcome{
		{Dataset: ds("shop", "orders"), Kind: ports.OperationPut, Completion: ports.CompletionWaitUntilApplied, Status: ports.StatusApplied},
		{Dataset: ds("shop", "orders"), Kind: ports.OperationPut, Completion: ports.CompletionWaitUntilApplied, Status: ports.StatusApplied},
		{Dataset: ds("shop", "orders"), Kind: ports.OperationPut, Completion: ports.CompletionWaitUntilApplied, Status: ports.StatusFailed, HasError: true, Code: domain.CodeInvalidArgument},
		{Dataset: ds("shop", "orders"), Kind: ports.OperationRead, Status: ports.StatusFound},
		{Source: ports.SourceWorker, Dataset: ds("shop", "orders"), Kind: ports.OperationMerge, Status: ports.StatusApplied},
	})
	checks := []struct {
		got  float64
		want float64
		what string
	}{
		{testutil.ToFloat64(m.operations.WithLabelValues("primary", "shop", "orders", "put", "wait_until_applied", "applied", "")), 2, "applied puts"},
		{testutil.ToFloat64(m.operations.WithLabelValues("primary", "shop", "orders", "put", "wait_until_applied", "failed", "INVALID_ARGUMENT")), 1, "failed puts"},
		{testutil.ToFloat64(m.operations.WithLabelValues("primary", "shop", "orders", "read", "", "found", "")), 1, "reads"},
		{testutil.ToFloat64(m.applied.WithLabelValues("primary", "shop", "orders", "merge", "applied", "")), 1, "worker merges"},
		{testutil.ToFloat64(m.overflow), 0, "overflow"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

func TestDatasetLabelsAreCapped(t *testing.T) {
	m := New(Options{Store: "primary", MaxDatasets: 2})
	op := func(ns, d string) ports.OperationOutcome {
		return ports.OperationOutcome{Dataset: ds(ns, d), Kind: ports.OperationRead, Status: ports.StatusNotFound}
	}
	m.Operations([]ports.OperationOutcome{op("a", "1"), op("a", "2"), op("a", "3"), op("b", "1"), op("a", "1")})
	if n := testutil.CollectAndCount(m.operations); n != 3 {
		t.Fatalf("%d series, want 2 datasets + _other", n)
	}
	if got := testutil.ToFloat64(m.operations.WithLabelValues(Other, Other, Other, "read", "", "not_found", "")); got != 2 {
		t.Fatalf("_other = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.overflow); got != 2 {
		t.Fatalf("overflow = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.operations.WithLabelValues("primary", "a", "1", "read", "", "not_found", "")); got != 2 {
		t.Fatalf("a/1 = %v, want 2 (an admitted dataset stays admitted)", got)
	}
	// Later operations find their series cached: an over-cap dataset is
	// still counted under _other and as overflow, every time.
	m.Operations([]ports.OperationOutcome{op("b", "1")})
	m.Operations([]ports.OperationOutcome{op("b", "1"), op("a", "1")})
	if got := testutil.ToFloat64(m.operations.WithLabelValues(Other, Other, Other, "read", "", "not_found", "")); got != 4 {
		t.Fatalf("_other = %v, want 4", got)
	}
	if got := testutil.ToFloat64(m.overflow); got != 4 {
		t.Fatalf("overflow = %v, want 4", got)
	}
}

// A dataset whose names are those of the overflow labels shares their
// series, and is counted as overflow only when the cap did not admit it.
func TestDatasetNamedLikeTheOverflowLabels(t *testing.T) {
	m := New(Options{Store: Other, MaxDatasets: 1})
	other := ports.OperationOutcome{Dataset: domain.DatasetRef{Store: Other, Namespace: Other, Dataset: Other}, Kind: ports.OperationRead, Status: ports.StatusNotFound}
	late := other
	late.Dataset.Dataset = "late"
	m.Operations([]ports.OperationOutcome{late}) // admitted, and the cap (1) is full
	m.Operations([]ports.OperationOutcome{other, other})
	if got := testutil.ToFloat64(m.overflow); got != 2 {
		t.Fatalf("overflow = %v, want 2 (the _other dataset came after the cap was full)", got)
	}
	m = New(Options{Store: Other, MaxDatasets: 1})
	m.Operations([]ports.OperationOutcome{other})
	m.Operations([]ports.OperationOutcome{late, other, late})
	if got := testutil.ToFloat64(m.overflow); got != 2 {
		t.Fatalf("overflow = %v, want 2 (the _other dataset was admitted, late was not)", got)
	}
	if got := testutil.ToFloat64(m.operations.WithLabelValues(Other, Other, Other, "read", "", "not_found", "")); got != 4 {
		t.Fatalf("_other = %v, want 4", got)
	}
}

// Rejected operations (no dataset) are counted under the served store
// and take none of the capped dataset slots.
func TestRejectedOperationsTakeNoDatasetSlot(t *testing.T) {
	m := New(Options{Store: "primary", MaxDatasets: 1})
	rejected := ports.OperationOutcome{Kind: ports.OperationPut, Completion: ports.CompletionWaitUntilApplied, Status: ports.StatusFailed, HasError: true, Code: domain.CodePermissionDenied}
	m.Operations([]ports.OperationOutcome{rejected, rejected, {Source: ports.SourceWorker, Kind: ports.OperationMerge, Status: ports.StatusFailed, HasError: true, Code: domain.CodeInvalidArgument}})
	m.Operations([]ports.OperationOutcome{{Dataset: ds("shop", "orders"), Kind: ports.OperationRead, Status: ports.StatusFound}})
	if got := testutil.ToFloat64(m.operations.WithLabelValues("primary", "shop", "orders", "read", "", "found", "")); got != 1 {
		t.Fatalf("the real dataset = %v, want 1 (it must still get its own labels)", got)
	}
	if got := testutil.ToFloat64(m.operations.WithLabelValues("primary", "", "", "put", "wait_until_applied", "failed", "PERMISSION_DENIED")); got != 2 {
		t.Fatalf("rejected = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.applied.WithLabelValues("primary", "", "", "merge", "failed", "INVALID_ARGUMENT")); got != 1 {
		t.Fatalf("rejected worker mutation = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.overflow); got != 0 {
		t.Fatalf("overflow = %v", got)
	}
}

func TestNamesThatCannotBeLabelsAreReplaced(t *testing.T) {
	m := New(Options{Store: "primary"})
	m.Operations([]ports.OperationOutcome{
		{Dataset: ds("\xff\xfe", strings.Repeat("x", 500)), Kind: ports.OperationRead, Status: ports.StatusFailed, HasError: true, Code: domain.CodeInvalidArgument},
		{Dataset: ds("a\x00b", "ok"), Kind: ports.OperationRead, Status: ports.StatusFailed, HasError: true, Code: domain.CodeInvalidArgument},
	})
	if got := testutil.ToFloat64(m.operations.WithLabelValues("primary", Invalid, Invalid, "read", "", "failed", "INVALID_ARGUMENT")); got != 1 {
		t.Fatalf("invalid names = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.operations.WithLabelValues("primary", Invalid, "ok", "read", "", "failed", "INVALID_ARGUMENT")); got != 1 {
		t.Fatalf("control characters = %v, want 1", got)
	}
}

func TestWorkerMeasurements(t *testing.T) {
	m := New(Options{Store: "primary"})
	m.WorkerLag("mutations", 3, 42)
	m.WorkerLag("mutations", 4, 7)
	if got := testutil.ToFloat64(m.lag.WithLabelValues("mutations", "3")); got != 42 {
		t.Fatalf("lag = %v", got)
	}
	m.WorkerLag("mutations", 3, -1)
	if n := testutil.CollectAndCount(m.lag); n != 1 {
		t.Fatalf("a revoked partition must be withdrawn: %d series", n)
	}
	m.DeadLettered(ports.DeadLetterReason{Code: domain.CodeInvalidArgument}, 2)
	m.DeadLettered(ports.DeadLetterReason{Undecodable: true}, 1)
	m.DeadLettered(ports.DeadLetterReason{Code: domain.CodeInvalidArgument}, 1)
	if got := testutil.ToFloat64(m.deadLettered.WithLabelValues("INVALID_ARGUMENT")); got != 3 {
		t.Fatalf("dead-lettered = %v", got)
	}
	if got := testutil.ToFloat64(m.deadLettered.WithLabelValues("UNDECODABLE")); got != 1 {
		t.Fatalf("dead-lettered undecodable = %v", got)
	}
	for i := 0; i < MaxReasons+5; i++ {
		m.DeadLettered(ports.DeadLetterReason{Code: domain.Code(i)}, 1)
	}
	if n := testutil.CollectAndCount(m.deadLettered); n != MaxReasons+1 {
		t.Fatalf("reasons must be capped: %d series", n)
	}
	m.Deduplicated(ports.SourceWorker, domain.Duplicate, 3)
	m.Deduplicated(ports.SourceWorker, domain.Superseded, 1)
	m.Deduplicated(ports.SourceRequest, domain.Duplicate, 2)
	m.Deduplicated(ports.SourceWorker, domain.Duplicate, 1)
	for _, c := range []struct {
		source, reason string
		want           float64
	}{{"worker", "duplicate", 4}, {"worker", "superseded", 1}, {"request", "duplicate", 2}, {"request", "superseded", 0}} {
		if got := testutil.ToFloat64(m.deduplicated.WithLabelValues(c.source, c.reason)); got != c.want {
			t.Fatalf("deduplicated{source=%s,reason=%s} = %v, want %v", c.source, c.reason, got, c.want)
		}
	}
	m.ApplyRetry(1500 * time.Millisecond)
	m.ApplyRetry(500 * time.Millisecond)
	if testutil.ToFloat64(m.applyRetries) != 2 || testutil.ToFloat64(m.applyBackoff) != 2 {
		t.Fatalf("retries %v backoff %v", testutil.ToFloat64(m.applyRetries), testutil.ToFloat64(m.applyBackoff))
	}
}

func TestHandlerServesTheExpositionFormat(t *testing.T) {
	m := New(Options{Store: "primary"})
	m.RPC("/sink.v1.Sink/Write", codes.OK, 3*time.Millisecond)
	m.RPC("/sink.v1.Sink/Write", codes.OK, 4*time.Millisecond)
	m.StorageCall(ports.StorageWrite, 10, time.Millisecond)
	m.QueuePublish(5, time.Millisecond)
	m.MergeConflict("merge-patch")
	m.Combined(ports.StorageWrite, 1)
	m.Combined(ports.StorageWrite, 12)
	m.Combined(ports.StorageRead, 3)
	m.SetReady(true)
	m.SetDependencyUp("storage", true)

	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		f, ok := families[name]
		if !ok {
			t.Fatalf("no metric %s", name)
		}
	next:
		for _, mt := range f.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			switch {
			case mt.Counter != nil:
				return mt.Counter.GetValue()
			case mt.Gauge != nil:
				return mt.Gauge.GetValue()
			case mt.Histogram != nil:
				return float64(mt.Histogram.GetSampleCount())
			}
		}
		t.Fatalf("no %s series with %v", name, labels)
		return 0
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sink_grpc_requests_total", map[string]string{"method": "/sink.v1.Sink/Write", "code": "OK"}, 2},
		{"sink_grpc_request_duration_seconds", map[string]string{"method": "/sink.v1.Sink/Write"}, 2},
		{"sink_storage_operations_total", map[string]string{"store": "primary", "call": "write"}, 10},
		{"sink_storage_call_duration_seconds", map[string]string{"call": "write"}, 1},
		{"sink_queue_published_mutations_total", nil, 5},
		{"sink_queue_publish_duration_seconds", nil, 1},
		{"sink_merge_conflicts_total", map[string]string{"profile": "merge-patch"}, 1},
		{"sink_storage_batch_callers", map[string]string{"store": "primary", "call": "write"}, 2},
		{"sink_storage_batch_callers", map[string]string{"store": "primary", "call": "read"}, 1},
		{"sink_ready", nil, 1},
		{"sink_dependency_up", map[string]string{"dependency": "storage"}, 1},
	} {
		if got := value(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if _, ok := families["go_goroutines"]; !ok {
		t.Error("the Go runtime collector is not registered")
	}
}

// The resolved series that RPC and Operations keep for the request path
// count exactly what label resolution counts, also past the cache bound.
func TestCachedSeriesCountLikeLabels(t *testing.T) {
	m := New(Options{Store: "primary"})
	o := ports.OperationOutcome{Dataset: ds("n", "d"), Kind: ports.OperationPut, Completion: ports.CompletionWaitUntilApplied, Status: ports.StatusApplied}
	for i := 0; i < 3; i++ {
		m.Operations([]ports.OperationOutcome{o})
		m.RPC("/sink.v1.Sink/Write", codes.OK, time.Millisecond)
	}
	m.Operations([]ports.OperationOutcome{o, o})
	if got := testutil.ToFloat64(m.operations.WithLabelValues("primary", "n", "d", "put", "wait_until_applied", "applied", "")); got != 5 {
		t.Fatalf("operations = %v, want 5", got)
	}
	if got := testutil.ToFloat64(m.rpcs.WithLabelValues("/sink.v1.Sink/Write", "OK")); got != 3 {
		t.Fatalf("rpcs = %v, want 3", got)
	}
	full := make(map[rpcKey]rpcSeries, maxCachedSeries) // full: further series resolve their labels each time
	for i := range maxCachedSeries {
		full[rpcKey{method: strconv.Itoa(i)}] = rpcSeries{}
	}
	m.rpcSeries.m.Store(&full)
	m.RPC("/sink.v1.Sink/Read", codes.OK, time.Millisecond)
	m.RPC("/sink.v1.Sink/Read", codes.OK, time.Millisecond)
	if got := testutil.ToFloat64(m.rpcs.WithLabelValues("/sink.v1.Sink/Read", "OK")); got != 2 {
		t.Fatalf("rpcs past the cache bound = %v, want 2", got)
	}
	if _, ok := m.rpcSeries.load(rpcKey{"/sink.v1.Sink/Read", codes.OK}); ok {
		t.Fatal("a series was cached past the bound")
	}
}

func TestEachProcessHasItsOwnRegistry(t *testing.T) {
	a, b := New(Options{}), New(Options{})
	a.MergeConflict("p")
	if testutil.ToFloat64(b.mergeConflicts.WithLabelValues("p")) != 0 {
		t.Fatal("metrics leak between registries")
	}
}

func BenchmarkOperations(b *testing.B) {
	m := New(Options{Store: "primary"})
	outcomes := make([]ports.OperationOutcome, 500)
	for i := range outcomes {
		outcomes[i] = ports.OperationOutcome{Dataset: ds("shop", "orders"), Kind: ports.OperationPut, Completion: ports.CompletionWaitUntilApplied, Status: ports.StatusApplied}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Operations(outcomes)
	}
}

// BenchmarkSingleOperation is what a single-record request reports: one
// outcome and one RPC.
func BenchmarkSingleOperation(b *testing.B) {
	m := New(Options{Store: "primary"})
	outcomes := []ports.OperationOutcome{{Dataset: ds("shop", "orders"), Kind: ports.OperationPut, Completion: ports.CompletionWaitUntilApplied, Status: ports.StatusApplied}}
	b.ReportAllocs()
	for b.Loop() {
		m.Operations(outcomes)
		m.RPC("/sink.v1.Sink/Write", codes.OK, time.Millisecond)
	}
}
