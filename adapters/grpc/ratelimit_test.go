package sinkgrpc

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func retryDelay(t *testing.T, err error) time.Duration {
	t.Helper()
	st, _ := status.FromError(err)
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

	if err := r.Admit(15, 100); err != nil {
		t.Fatalf("within the burst: %v", err)
	}
	// 5 operations left: a request of 6 is rejected whole, with the delay
	// after which 6 are available (1 more operation at 10/s = 100ms).
	err := r.Admit(6, 10)
	if d := retryDelay(t, err); d != 100*time.Millisecond {
		t.Fatalf("retry delay %v, want 100ms", d)
	}
	if !strings.Contains(err.Error(), "retry after 100ms") || !strings.Contains(err.Error(), `store "primary"`) {
		t.Fatalf("message: %v", err)
	}
	// The rejection took nothing: 5 operations still fit.
	if err := r.Admit(5, 10); err != nil {
		t.Fatalf("the rejected request consumed tokens: %v", err)
	}
	// Bytes: the operations bucket has refilled, but bytes are short; the
	// operations taken for the rejected request are given back.
	now = now.Add(time.Second) // +10 operations, bytes full again
	if err := r.Admit(1, 600); err != nil {
		t.Fatal(err)
	}
	if d := retryDelay(t, r.Admit(1, 600)); d != 200*time.Millisecond {
		t.Fatalf("bytes over the limit: delay %v, want 200ms", d)
	}
	if err := r.Admit(9, 10); err != nil {
		t.Fatalf("operations of the request rejected for bytes were not returned: %v", err)
	}
	// Larger than the burst: never admissible, no retry hint.
	err = r.Admit(21, 1)
	if d := retryDelay(t, err); d != -1 || !strings.Contains(err.Error(), "split it") {
		t.Fatalf("above the burst: %v (delay %v)", err, d)
	}
}

func TestRateLimiterUnlimited(t *testing.T) {
	r := NewRateLimiter("s", RateLimit{})
	for i := 0; i < 1000; i++ {
		if err := r.Admit(1000, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
}
