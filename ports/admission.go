package ports

import "context"

// AdmissionRequest is what one request would cost once admitted: only its
// operations that passed validation and authorization count, so that
// invalid and denied operations never spend anyone's budget.
type AdmissionRequest struct {
	// Principal is the name of the authenticated caller; "" without
	// authentication.
	Principal string
	// Operations is the number of admitted reads, puts, merges or deletes.
	Operations int
	// Bytes is the size of their keys, documents and intents.
	Bytes int
}

// Admission decides whether the application does the work of a request
// (rate limiting; an adapter implements it). It is called once per request
// that has at least one valid, authorized operation, before any storage or
// queue call, and must not block: a request that does not fit now is
// rejected at once.
type Admission interface {
	// Admit takes the request's cost from the caller's and the store's
	// budgets, or nothing. A non-nil error rejects the whole request and is
	// returned to the caller unchanged: a *domain.Error with
	// CodeResourceExhausted, or an error of the driving adapter that says
	// more (the gRPC adapter's limiter returns a RESOURCE_EXHAUSTED status
	// with a retry delay).
	Admit(ctx context.Context, r AdmissionRequest) error
}
