package sinkgrpc

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/ports"
)

func retryDelay(t *testing.T, err error) time.Duration {
	t.Helper()
	st, _ := status.FromError(StatusError(err))
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("code %v (%v), want RESOURCE_EXHAUSTED", st.Code(), err)
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

func TestRateLimiterAdmitsWholeRequestsOrNothing(t *testing.T) {
	now := time.Unix(1000, 0)
	r := NewRateLimiter("primary", RateLimit{OpsPerSecond: 10, OpsBurst: 20, BytesPerSecond: 1000, BytesBurst: 1000})
	r.now = func() time.Time { return now }

	if err := r.admit("", 15, 100); err != nil {
		t.Fatalf("within the burst: %v", err)
	}
	// 5 operations left: a request of 6 is rejected whole, with the delay
	// after which 6 are available (1 more operation at 10/s = 100ms).
	err := r.admit("", 6, 10)
	if d := retryDelay(t, err); d != 100*time.Millisecond {
		t.Fatalf("retry delay %v, want 100ms", d)
	}
	if !strings.Contains(err.Error(), "retry after 100ms") || !strings.Contains(err.Error(), `store "primary"`) {
		t.Fatalf("message: %v", err)
	}
	// The rejection took nothing: 5 operations still fit.
	if err := r.admit("", 5, 10); err != nil {
		t.Fatalf("the rejected request consumed tokens: %v", err)
	}
	// Bytes: the operations bucket has refilled, but bytes are short; the
	// operations taken for the rejected request are given back.
	now = now.Add(time.Second) // +10 operations, bytes full again
	if err := r.admit("", 1, 600); err != nil {
		t.Fatal(err)
	}
	if d := retryDelay(t, r.admit("", 1, 600)); d != 200*time.Millisecond {
		t.Fatalf("bytes over the limit: delay %v, want 200ms", d)
	}
	if err := r.admit("", 9, 10); err != nil {
		t.Fatalf("operations of the request rejected for bytes were not returned: %v", err)
	}
	// Larger than the burst: never admissible, no retry hint.
	err = r.admit("", 21, 1)
	if d := retryDelay(t, err); d != -1 || !strings.Contains(err.Error(), "split it") {
		t.Fatalf("above the burst: %v (delay %v)", err, d)
	}
}

func TestRateLimiterUnlimited(t *testing.T) {
	r := NewRateLimiter("s", RateLimit{})
	for i := 0; i < 1000; i++ {
		if err := r.admit("", 1000, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRateLimiterImplementsAdmission(t *testing.T) {
	var a ports.Admission = NewRateLimiter("primary", RateLimit{OpsPerSecond: 1, OpsBurst: 2})
	if err := a.Admit(context.Background(), ports.AdmissionRequest{Operations: 2, Bytes: 10}); err != nil {
		t.Fatal(err)
	}
	if d := retryDelay(t, a.Admit(context.Background(), ports.AdmissionRequest{Operations: 1})); d != time.Second {
		t.Fatalf("retry delay %v, want 1s", d)
	}
}

// Each principal has a budget of its own beside the store's: one caller
// that spends its own cannot spend the others'.
func TestRateLimiterPerPrincipal(t *testing.T) {
	now := time.Unix(1000, 0)
	r := NewRateLimiter("primary", RateLimit{OpsPerSecond: 100, OpsBurst: 100, PrincipalOpsPerSecond: 1, PrincipalOpsBurst: 10})
	r.now = func() time.Time { return now }
	if err := r.admit("greedy", 10, 0); err != nil {
		t.Fatal(err)
	}
	err := r.admit("greedy", 1, 0)
	if d := retryDelay(t, err); d != time.Second || !strings.Contains(err.Error(), `principal "greedy"`) {
		t.Fatalf("greedy: %v (delay %v)", err, d)
	}
	// The rejection took nothing from the store: 90 operations are left.
	for _, p := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"} {
		if err := r.admit(p, 10, 0); err != nil {
			t.Fatalf("principal %s: %v", p, err)
		}
	}
	if err := r.admit("j", 1, 0); !strings.Contains(fmt.Sprint(err), `store "primary"`) {
		t.Fatalf("the store's budget is spent: %v", err)
	}
	// A request over a principal's burst can never be admitted.
	if err := r.admit("k", 11, 0); !strings.Contains(fmt.Sprint(err), "split it") {
		t.Fatalf("above the principal's burst: %v", err)
	}
	// Without a principal (no authentication) only the store's budget applies.
	now = now.Add(time.Second)
	if err := r.admit("", 100, 0); err != nil {
		t.Fatalf("anonymous: %v", err)
	}
}

// The per-principal buckets are bounded: idle (full) ones are dropped, and
// beyond the bound principals share one bucket.
func TestRateLimiterBoundsPrincipalBuckets(t *testing.T) {
	now := time.Unix(1000, 0)
	r := NewRateLimiter("primary", RateLimit{PrincipalOpsPerSecond: 1, PrincipalOpsBurst: 5})
	r.now = func() time.Time { return now }
	r.maxBuckets = 3
	for i := 0; i < 3; i++ {
		if err := r.admit(fmt.Sprint("busy-", i), 5, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Every bucket is in use: new principals share one.
	if err := r.admit("new-1", 5, 0); err != nil {
		t.Fatal(err)
	}
	if d := retryDelay(t, r.admit("new-2", 1, 0)); d != time.Second {
		t.Fatalf("shared bucket: delay %v", d)
	}
	if len(r.principals) != 3 {
		t.Fatalf("%d buckets, want at most 3", len(r.principals))
	}
	// Once the buckets refilled, they are dropped for new principals.
	now = now.Add(10 * time.Second)
	if err := r.admit("new-3", 5, 0); err != nil {
		t.Fatal(err)
	}
	if len(r.principals) != 1 || r.principals["new-3"] == nil {
		t.Fatalf("buckets %v, want only new-3's", r.principals)
	}
}

// Concurrent requests on an exhausted bucket each get the true delay: one
// operation at 1/s is never more than 1 s away (unserialized reservations
// saw each other before they were cancelled and reported 2 s and more).
func TestRateLimiterConcurrentRejectionsReportTheTrueDelay(t *testing.T) {
	now := time.Unix(1000, 0)
	r := NewRateLimiter("primary", RateLimit{OpsPerSecond: 1, OpsBurst: 1})
	r.now = func() time.Time { return now }
	if err := r.admit("", 1, 0); err != nil {
		t.Fatal(err)
	}
	const n = 64
	delays := make(chan time.Duration, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			err := r.admit("", 1, 0)
			st, _ := status.FromError(StatusError(err))
			for _, d := range st.Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok {
					delays <- ri.GetRetryDelay().AsDuration()
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(delays)
	got := 0
	for d := range delays {
		got++
		if d <= 0 || d > time.Second {
			t.Fatalf("retry delay %v, want (0, 1s]", d)
		}
	}
	if got != n {
		t.Fatalf("%d of %d requests were rejected with a delay", got, n)
	}
}
