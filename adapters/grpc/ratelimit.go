package sinkgrpc

import (
	"context"
	"fmt"
	"strings"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// RateLimit bounds the work one store accepts. Zero rates are unlimited.
type RateLimit struct {
	// OpsPerSecond and OpsBurst bound operations (one per read, put, merge
	// or delete of a request).
	OpsPerSecond float64
	OpsBurst     int
	// BytesPerSecond and BytesBurst bound request bytes (the encoded size
	// of the request message).
	BytesPerSecond float64
	BytesBurst     int
}

// Enabled reports whether any limit is set.
func (l RateLimit) Enabled() bool { return l.OpsPerSecond > 0 || l.BytesPerSecond > 0 }

// RateLimiter admits or rejects whole Sink API requests against token
// buckets of the served store. It never delays a request: one that would
// have to wait is rejected at once with RESOURCE_EXHAUSTED and a
// google.rpc.RetryInfo detail saying when to retry, so that admitted work
// keeps its order and nothing half-admitted is ever executed.
type RateLimiter struct {
	store string
	ops   *rate.Limiter // nil: unlimited
	bytes *rate.Limiter
	now   func() time.Time
}

// NewRateLimiter returns the limiter of the given store.
func NewRateLimiter(store string, l RateLimit) *RateLimiter {
	r := &RateLimiter{store: store, now: time.Now}
	if l.OpsPerSecond > 0 {
		r.ops = rate.NewLimiter(rate.Limit(l.OpsPerSecond), l.OpsBurst)
	}
	if l.BytesPerSecond > 0 {
		r.bytes = rate.NewLimiter(rate.Limit(l.BytesPerSecond), l.BytesBurst)
	}
	return r
}

// ServerOptions returns the unary interceptor.
func (r *RateLimiter) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(r.Unary)}
}

// Unary is the unary server interceptor; it limits the Sink service only.
func (r *RateLimiter) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !strings.HasPrefix(info.FullMethod, "/"+ServiceName+"/") {
		return handler(ctx, req)
	}
	if err := r.Admit(operationCount(req), requestBytes(req)); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func operationCount(req any) int {
	switch r := req.(type) {
	case *sinkv1.ReadRequest:
		return len(r.GetOperations())
	case *sinkv1.WriteRequest:
		return len(r.GetOperations())
	case *sinkv1.DeleteRequest:
		return len(r.GetOperations())
	}
	return 1
}

func requestBytes(req any) int {
	if m, ok := req.(proto.Message); ok {
		return proto.Size(m)
	}
	return 0
}

// Admit takes ops operations and n bytes from the buckets, or nothing: it
// returns a RESOURCE_EXHAUSTED status error when either bucket cannot
// supply them now.
func (r *RateLimiter) Admit(ops, n int) error {
	now := r.now()
	var taken []*rate.Reservation
	release := func() {
		for _, t := range taken {
			t.CancelAt(now)
		}
	}
	for _, b := range []struct {
		lim  *rate.Limiter
		n    int
		unit string
	}{{r.ops, ops, "operations"}, {r.bytes, n, "bytes"}} {
		if b.lim == nil || b.n == 0 {
			continue
		}
		res := b.lim.ReserveN(now, b.n)
		if !res.OK() {
			release()
			return status.Errorf(codes.ResourceExhausted,
				"rate limit of store %q: the request needs %d %s but at most %d can ever be admitted at once (the burst); split it into smaller requests",
				r.store, b.n, b.unit, b.lim.Burst())
		}
		taken = append(taken, res)
		if d := res.DelayFrom(now); d > 0 {
			release()
			return retryLater(fmt.Sprintf("rate limit of store %q exceeded (%g %s/s): the request needs %d %s; retry after %s",
				r.store, float64(b.lim.Limit()), b.unit, b.n, b.unit, roundUp(d)), d)
		}
	}
	return nil
}

func roundUp(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// retryLater returns RESOURCE_EXHAUSTED with a google.rpc.RetryInfo detail.
func retryLater(msg string, d time.Duration) error {
	st := status.New(codes.ResourceExhausted, msg)
	if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(roundUp(d))}); err == nil {
		st = withInfo
	}
	return st.Err()
}
