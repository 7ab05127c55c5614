package sinkgrpc

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

var _ ports.Admission = (*RateLimiter)(nil)

// RateLimit bounds the work one store, and each principal, may have done.
// Zero rates are unlimited.
type RateLimit struct {
	// OpsPerSecond and OpsBurst bound the operations of the store (one per
	// admitted read, put, merge or delete of a request).
	OpsPerSecond float64
	OpsBurst     int
	// BytesPerSecond and BytesBurst bound the bytes of the store (keys,
	// documents and intents of the admitted operations).
	BytesPerSecond float64
	BytesBurst     int
	// PrincipalOpsPerSecond and PrincipalOpsBurst bound the operations of
	// each authenticated principal, so that one caller cannot spend the
	// store's whole budget. Requests without a principal (authentication
	// disabled) are bounded by the store's budget only.
	PrincipalOpsPerSecond float64
	PrincipalOpsBurst     int
}

// Enabled reports whether any limit is set.
func (l RateLimit) Enabled() bool {
	return l.OpsPerSecond > 0 || l.BytesPerSecond > 0 || l.PrincipalOpsPerSecond > 0
}

// MaxPrincipalBuckets bounds the per-principal buckets kept at once.
// Principals come from the authorization file, so there are normally far
// fewer; beyond it, the principals without a bucket of their own share one.
const MaxPrincipalBuckets = 10000

// RateLimiter implements ports.Admission with token buckets: one for the
// operations and one for the bytes of the served store, and one for the
// operations of each principal. The application asks it once per request,
// after validation and authorization, with the request's valid and
// authorized operations only, so that invalid and denied operations spend
// nobody's budget. It never delays a request: one that would have to wait
// is rejected at once with RESOURCE_EXHAUSTED and a google.rpc.RetryInfo
// detail saying when to retry, so that admitted work keeps its order and
// nothing half-admitted is ever executed.
type RateLimiter struct {
	store string
	limit RateLimit
	ops   *rate.Limiter // nil: unlimited
	bytes *rate.Limiter
	now   func() time.Time

	admitting sync.Mutex // serializes admit

	mu         sync.Mutex
	principals map[string]*rate.Limiter
	shared     *rate.Limiter // principals beyond MaxPrincipalBuckets
	maxBuckets int
}

// NewRateLimiter returns the limiter of the given store.
func NewRateLimiter(store string, l RateLimit) *RateLimiter {
	r := &RateLimiter{store: store, limit: l, now: time.Now, principals: map[string]*rate.Limiter{}, maxBuckets: MaxPrincipalBuckets}
	if l.OpsPerSecond > 0 {
		r.ops = rate.NewLimiter(rate.Limit(l.OpsPerSecond), l.OpsBurst)
	}
	if l.BytesPerSecond > 0 {
		r.bytes = rate.NewLimiter(rate.Limit(l.BytesPerSecond), l.BytesBurst)
	}
	return r
}

// Admit implements ports.Admission.
func (r *RateLimiter) Admit(_ context.Context, req ports.AdmissionRequest) error {
	return r.admit(req.Principal, req.Operations, req.Bytes)
}

// principal returns the bucket of a principal (nil: unlimited).
func (r *RateLimiter) principal(name string, now time.Time) *rate.Limiter {
	if name == "" || r.limit.PrincipalOpsPerSecond <= 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.principals[name]; ok {
		return b
	}
	if len(r.principals) >= r.maxBuckets {
		// A full bucket is the same as a new one: dropping those loses nothing.
		for n, b := range r.principals {
			if b.TokensAt(now) >= float64(b.Burst()) {
				delete(r.principals, n)
			}
		}
	}
	if len(r.principals) >= r.maxBuckets {
		if r.shared == nil {
			r.shared = r.newPrincipalBucket()
		}
		return r.shared
	}
	b := r.newPrincipalBucket()
	r.principals[name] = b
	return b
}

func (r *RateLimiter) newPrincipalBucket() *rate.Limiter {
	return rate.NewLimiter(rate.Limit(r.limit.PrincipalOpsPerSecond), r.limit.PrincipalOpsBurst)
}

// admit takes ops operations and n bytes from the buckets, or nothing: it
// returns a RESOURCE_EXHAUSTED status error when any bucket cannot supply
// them now.
//
// Admissions are serialized: concurrent reservations on an exhausted
// bucket would otherwise each see the others' reservations not yet
// cancelled, and report more than the true delay (two at once: 2 s at
// 1 operation/s).
func (r *RateLimiter) admit(principal string, ops, n int) error {
	r.admitting.Lock()
	defer r.admitting.Unlock()
	now := r.now()
	var taken []*rate.Reservation
	release := func() {
		for _, t := range taken {
			t.CancelAt(now)
		}
	}
	whose := fmt.Sprintf("of principal %q", principal)
	for _, b := range []struct {
		lim   *rate.Limiter
		n     int
		unit  string
		whose string
	}{
		{r.principal(principal, now), ops, "operations", whose},
		{r.ops, ops, "operations", fmt.Sprintf("of store %q", r.store)},
		{r.bytes, n, "bytes", fmt.Sprintf("of store %q", r.store)},
	} {
		if b.lim == nil || b.n == 0 {
			continue
		}
		res := b.lim.ReserveN(now, b.n)
		if !res.OK() {
			release()
			return domain.Errorf(domain.CodeResourceExhausted,
				"rate limit %s: the request needs %d %s but at most %d can ever be admitted at once (the burst); split it into smaller requests",
				b.whose, b.n, b.unit, b.lim.Burst())
		}
		taken = append(taken, res)
		if d := res.DelayFrom(now); d > 0 {
			release()
			return retryLater(fmt.Sprintf("rate limit %s exceeded (%g %s/s): the request needs %d %s; retry after %s",
				b.whose, float64(b.lim.Limit()), b.unit, b.n, b.unit, roundUp(d)), d)
		}
	}
	return nil
}

func roundUp(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// retryLater returns a retryable RESOURCE_EXHAUSTED error that asks the
// caller to wait d (StatusError turns it into a google.rpc.RetryInfo detail).
func retryLater(msg string, d time.Duration) error {
	return &domain.Error{Code: domain.CodeResourceExhausted, Message: msg, Retryable: true, RetryAfter: roundUp(d)}
}
