package integration_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/fx"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	"github.com/sink-io/sink/ports"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// A burst above the rate limit: the excess requests are rejected whole with
// RESOURCE_EXHAUSTED and a RetryInfo delay, and every admitted write is in
// storage (nothing admitted is lost, nothing rejected is written).
func TestRateLimitRejectsTheExcessAndLosesNothingAdmitted(t *testing.T) {
	var storage ports.Storage
	const burst = 10
	s := sinktest.Start(t, map[string]string{
		"SINK_RATE_LIMIT_OPS":       "1",
		"SINK_RATE_LIMIT_OPS_BURST": fmt.Sprint(burst),
		"SINK_MAX_OPERATIONS":       fmt.Sprint(burst),
	}, fx.Populate(&storage))

	const n = 40
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, n)
	results := make([]*sinkv1.WriteResponse, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = s.Client.Write(ctx(t), &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{
				putOp(addr("n", "d", fmt.Sprintf("k-%02d", i)), fmt.Sprintf(`{"i":%d}`, i), sinkv1.PutMode_PUT_MODE_UPSERT, nil)}})
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	var admitted, rejected []int
	for i, err := range errs {
		if err == nil {
			expectApplied(t, "admitted write", results[i].Results[0])
			admitted = append(admitted, i)
			continue
		}
		st := expectCode(t, "rejected write", err, codes.ResourceExhausted)
		var delay time.Duration
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay = ri.GetRetryDelay().AsDuration()
			}
		}
		if delay <= 0 || delay > time.Second {
			t.Fatalf("rejection %d: RetryInfo delay %v, want (0, 1s] at 1 operation/s: %v", i, delay, err)
		}
		if !strings.Contains(st.Message(), "retry after") {
			t.Fatalf("rejection %d does not say when to retry: %q", i, st.Message())
		}
		rejected = append(rejected, i)
	}
	// The burst is admitted, plus at most one operation per second elapsed.
	if maxAdmitted := burst + int(elapsed/time.Second) + 1; len(admitted) < burst || len(admitted) > maxAdmitted {
		t.Fatalf("admitted %d of %d in %v, want between %d and %d", len(admitted), n, elapsed, burst, maxAdmitted)
	}
	if len(rejected) == 0 {
		t.Fatal("nothing was rejected")
	}
	// Check storage directly (reads through the API are rate-limited too).
	addrs := make([]domain.Address, n)
	for i := range addrs {
		addrs[i] = domain.Address{Store: "primary", Namespace: "n", Dataset: "d", Key: domain.StringKey(fmt.Sprintf("k-%02d", i))}
	}
	got := storage.Read(ctx(t), addrs)
	for _, i := range admitted {
		if !got[i].Found || string(got[i].Record.Document.Data) != fmt.Sprintf(`{"i":%d}`, i) {
			t.Errorf("admitted write %d is not in storage: %+v", i, got[i])
		}
	}
	for _, i := range rejected {
		if got[i].Found {
			t.Errorf("rejected write %d was written", i)
		}
	}

	// A request larger than what is left is rejected whole: none of its
	// operations is written.
	var ops []*sinkv1.WriteOperation
	for i := 0; i < burst; i++ {
		ops = append(ops, putOp(addr("n", "batch", fmt.Sprint(i)), `{}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))
	}
	_, err := s.Client.Write(ctx(t), &sinkv1.WriteRequest{Operations: ops})
	expectCode(t, "batch above the remaining tokens", err, codes.ResourceExhausted)
	for i, r := range storage.Read(ctx(t), []domain.Address{{Store: "primary", Namespace: "n", Dataset: "batch", Key: domain.StringKey("0")}}) {
		if r.Found {
			t.Fatalf("operation %d of a rejected batch was written", i)
		}
	}
	if _, ok := status.FromError(err); !ok {
		t.Fatal("not a status error")
	}
}

// The scenario: a principal that may only read sends writes to 150
// invented datasets, and operations naming a store that is not served.
// None of them spends the store's rate budget or takes a dataset label
// slot: the admin's writes to a real dataset that come after are admitted
// and counted under their own labels.
func TestRateLimitAndLabelsCountOnlyValidAuthorizedOperations(t *testing.T) {
	const readerToken, adminToken = "sink_reader-token-for-tests", "sink_admin-token-for-tests"
	path := newAuthFile(t,
		principalSpec{name: "reader", token: readerToken, grants: `[{"namespace":"shop","dataset":"orders","rights":["read"]}]`},
		principalSpec{name: "admin", token: adminToken, grants: `[{"rights":["read","write","delete"]}]`})
	const burst = 200
	s := sinktest.Start(t, map[string]string{
		"SINK_AUTH_TOKEN_FILE":      path,
		"SINK_RATE_LIMIT_OPS":       "1",
		"SINK_RATE_LIMIT_OPS_BURST": fmt.Sprint(burst),
		"SINK_MAX_OPERATIONS":       fmt.Sprint(burst),
		"SINK_METRICS_MAX_DATASETS": "100",
	})
	if s.HTTPAddr == "" {
		t.Fatal("no metrics endpoint")
	}
	const rejectedStore = "rejected-store-name"
	for round := 0; round < 3; round++ {
		var ops []*sinkv1.WriteOperation
		for i := 0; i < 150; i++ {
			ops = append(ops, putOp(addr("invented", fmt.Sprintf("invented-%03d", i), "k"), `{}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))
		}
		elsewhere := addr("shop", "orders", "k")
		elsewhere.Store = rejectedStore
		ops = append(ops, putOp(elsewhere, `{}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))
		resp, err := s.Client.Write(withToken(t, readerToken), &sinkv1.WriteRequest{Operations: ops})
		if err != nil {
			t.Fatalf("round %d: denied operations spent the rate budget: %v", round, err)
		}
		for i, r := range resp.Results[:150] {
			expectFailure(t, fmt.Sprint("denied write ", i), r.Status, r.Error, failedStatus, uint32(codes.PermissionDenied), `principal "reader"`)
		}
		expectFailure(t, "other store", resp.Results[150].Status, resp.Results[150].Error, failedStatus, uint32(codes.InvalidArgument), rejectedStore)
		// Reads of another store cost nothing either.
		bad := addr("shop", "orders", "k")
		bad.Store = rejectedStore
		if _, err := s.Client.Read(withToken(t, readerToken), &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: bad}}}); err != nil {
			t.Fatalf("round %d: read of another store: %v", round, err)
		}
	}

	// The admin's burst is whole.
	var ops []*sinkv1.WriteOperation
	for i := 0; i < burst; i++ {
		ops = append(ops, putOp(addr("shop", "real", fmt.Sprint(i)), `{}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))
	}
	resp, err := s.Client.Write(withToken(t, adminToken), &sinkv1.WriteRequest{Operations: ops})
	if err != nil {
		t.Fatalf("the admin's writes were not admitted: %v", err)
	}
	for i, r := range resp.Results {
		expectApplied(t, fmt.Sprint("admin write ", i), r)
	}
	// ...and the store's budget is now spent, by valid operations only.
	_, err = s.Client.Write(withToken(t, adminToken), &sinkv1.WriteRequest{Operations: ops[:5]})
	expectCode(t, "over the budget", err, codes.ResourceExhausted)

	m := opsScrape(t, s.HTTPAddr)
	real := map[string]string{"store": "primary", "namespace": "shop", "dataset": "real", "kind": "put", "status": "applied"}
	if got := m.value("sink_operations_total", real); got != burst {
		t.Fatalf("the real dataset counts %v, want %d; series: %v", got, burst, m.series("sink_operations_total"))
	}
	if got := m.value("sink_metrics_datasets_overflow_total", nil); got != 0 {
		t.Fatalf("overflow %v: rejected operations took dataset slots", got)
	}
	denied := map[string]string{"store": "primary", "namespace": "", "dataset": "", "kind": "put", "code": "PERMISSION_DENIED"}
	if got := m.value("sink_operations_total", denied); got != 3*150 {
		t.Fatalf("denied operations counted %v, want %d without their datasets", got, 3*150)
	}
	for name := range m {
		for _, series := range m.series(name) {
			if strings.Contains(series, "invented") || strings.Contains(series, rejectedStore) {
				t.Fatalf("a rejected name became a label: %s%s", name, series)
			}
		}
	}
}
