package integration_test

import (
	"fmt"
	"strings"
	"testing"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// A known workload moves the counters by exactly the expected amounts, and
// no record key ever becomes a label value.
func TestOpsMetricsCountWorkload(t *testing.T) {
	s, st := opsStartWithStorage(t, nil)
	before := opsScrape(t, s.HTTPAddr)

	const puts = 5
	var ops []*sinkv1.WriteOperation
	var keys []string
	for i := 0; i < puts; i++ {
		k := fmt.Sprintf("metric-key-%d", i)
		keys = append(keys, k)
		ops = append(ops, putOp(addr("shop", "orders", k), `{"n":1}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))
	}
	for i, r := range write(t, s.Client, ops...) {
		expectApplied(t, fmt.Sprint("put ", i), r)
	}
	// Three failures: two CREATEs of existing records, one unknown profile.
	res := write(t, s.Client,
		putOp(addr("shop", "orders", keys[0]), `{}`, sinkv1.PutMode_PUT_MODE_CREATE, nil),
		putOp(addr("shop", "orders", keys[1]), `{}`, sinkv1.PutMode_PUT_MODE_CREATE, nil),
		mergeOp(addr("shop", "orders", keys[2]), "no-such-profile", `{}`))
	if res[0].Status != precondition || res[1].Status != precondition || res[2].Status != failedStatus {
		t.Fatalf("failures: %v", res)
	}
	// Two merges; the first meets one (injected) concurrent change.
	st.conflictOn("metric-merge")
	expectApplied(t, "merge 1", write(t, s.Client, mergeOp(addr("shop", "carts", "metric-merge"), "merge-patch", `{"a":1}`))[0])
	expectApplied(t, "merge 2", write(t, s.Client, mergeOp(addr("shop", "carts", "metric-merge"), "merge-patch", `{"b":2}`))[0])
	got := read(t, s.Client, addr("shop", "orders", keys[0]), addr("shop", "orders", keys[1]), addr("shop", "orders", "metric-missing"))
	if got[0].Status != found || got[1].Status != found || got[2].Status != notFound {
		t.Fatalf("reads: %v", got)
	}
	if _, err := s.Client.Write(ctx(t), &sinkv1.WriteRequest{}); err == nil {
		t.Fatal("an empty request was accepted")
	}

	after := opsScrape(t, s.HTTPAddr)
	delta := func(name string, labels map[string]string) float64 {
		return after.value(name, labels) - before.value(name, labels)
	}
	op := func(ds, kind, completion, status, code string) map[string]string {
		ns := "shop"
		if ds == "" {
			ns = ""
		}
		return map[string]string{"store": "primary", "namespace": ns, "dataset": ds, "kind": kind, "completion": completion, "status": status, "code": code}
	}
	const wait = "wait_until_applied"
	write := "/sink.v1.Sink/Write"
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sink_operations_total", op("orders", "put", wait, "applied", ""), puts},
		{"sink_operations_total", op("orders", "put", wait, "precondition_failed", "ALREADY_EXISTS"), 2},
		// An invalid operation is counted without its dataset (see
		// TestOpsMetricsLabelOnlyValidAuthorizedOperations).
		{"sink_operations_total", op("", "merge", wait, "failed", "INVALID_ARGUMENT"), 1},
		{"sink_operations_total", op("carts", "merge", wait, "applied", ""), 2},
		{"sink_operations_total", op("orders", "read", "", "found", ""), 2},
		{"sink_operations_total", op("orders", "read", "", "not_found", ""), 1},
		{"sink_operations_total", nil, puts + 3 + 2 + 3},
		{"sink_merge_conflicts_total", map[string]string{"profile": "merge-patch"}, 1},
		{"sink_grpc_requests_total", map[string]string{"method": write, "code": "OK"}, 4},
		{"sink_grpc_requests_total", map[string]string{"method": write, "code": "InvalidArgument"}, 1},
		{"sink_grpc_requests_total", map[string]string{"method": "/sink.v1.Sink/Read", "code": "OK"}, 1},
		{"sink_grpc_request_duration_seconds", map[string]string{"method": write}, 5},
		// puts 5, failing creates 2, merge 1 + its retry 1, merge 2: 1.
		{"sink_storage_operations_total", map[string]string{"store": "primary", "call": "write"}, 10},
		// merge reads 2 + 1, the read request 3.
		{"sink_storage_operations_total", map[string]string{"store": "primary", "call": "read"}, 6},
		{"sink_storage_call_duration_seconds", map[string]string{"call": "write"}, 5},
		{"sink_storage_call_duration_seconds", map[string]string{"call": "read"}, 4},
		{"sink_queue_published_mutations_total", nil, 0},
	} {
		if got := delta(c.name, c.labels); got != c.want {
			t.Errorf("%s%v moved by %v, want %v; series: %v", c.name, c.labels, got, c.want, after.series(c.name))
		}
	}
	if after.value("sink_ready", nil) != 1 {
		t.Error("sink_ready is not 1")
	}
	for name := range after {
		if !strings.HasPrefix(name, "sink_") {
			continue
		}
		for _, series := range after.series(name) {
			if strings.Contains(series, "metric-key") || strings.Contains(series, "metric-merge") || strings.Contains(series, "metric-missing") {
				t.Errorf("a record key became a label: %s%s", name, series)
			}
		}
	}
}

// The sink process raises the collector's heap goal to the floor of
// SINK_GC_HEAP_FLOOR_BYTES while its heap is small (its own metrics: the
// Go runtime's GOGC percentage and next heap goal), and leaves Go's
// pacing alone with 0.
func TestGCHeapFloorProcess(t *testing.T) {
	const floor = 48 << 20
	for _, c := range []struct {
		env          string
		gogc         func(float64) bool
		goal         func(float64) bool
		wantGC, want string
	}{
		{"SINK_GC_HEAP_FLOOR_BYTES=" + fmt.Sprint(floor),
			func(p float64) bool { return p > 100 }, func(g float64) bool { return g > floor*3/4 && g <= floor },
			"above 100", "between 36 and 48 MiB"},
		{"SINK_GC_HEAP_FLOOR_BYTES=0",
			func(p float64) bool { return p == 100 }, func(g float64) bool { return g < 16<<20 },
			"100", "under 16 MiB"},
	} {
		p := startSinkProcess(t, c.env, "GOGC=")
		m := opsScrape(t, p.httpAddr)
		if g := m.value("go_gc_gogc_percent", nil); !c.gogc(g) {
			t.Errorf("%s: GOGC percentage %v, want %s", c.env, g, c.wantGC)
		}
		if g := m.value("go_memstats_next_gc_bytes", nil); !c.goal(g) {
			t.Errorf("%s: next heap goal %.1f MiB, want %s", c.env, g/(1<<20), c.want)
		}
	}
}
