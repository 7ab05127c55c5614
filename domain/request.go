package domain

import "context"

// RequestInfo identifies the client request a piece of work belongs to, for
// logs. The driving adapter (gRPC) puts it into the context; the application
// reads it when it logs.
type RequestInfo struct {
	// ID is the request id: the client's x-request-id, or one generated for
	// the request. It is returned to the client.
	ID string
	// Method names the entry point, e.g. "/sink.v1.Sink/Write".
	Method string
}

type requestKey struct{}

// ContextWithRequest returns a context carrying info.
func ContextWithRequest(ctx context.Context, info RequestInfo) context.Context {
	return context.WithValue(ctx, requestKey{}, info)
}

// RequestFromContext returns the request information of ctx (the zero value
// when there is none).
func RequestFromContext(ctx context.Context) RequestInfo {
	info, _ := ctx.Value(requestKey{}).(RequestInfo)
	return info
}
