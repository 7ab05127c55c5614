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

// RequestContext is a context carrying request information (what
// ContextWithRequest returns). A driving adapter may embed one in a
// per-request value of its own, so that the context takes no allocation
// of its own: context.WithValue would take two (the context, and the
// information boxed as an interface value).
type RequestContext struct {
	context.Context
	Info RequestInfo
}

// Value returns the request information for RequestFromContext, and the
// parent's values for other keys.
func (c *RequestContext) Value(key any) any {
	if _, ok := key.(requestKey); ok {
		return &c.Info
	}
	return c.Context.Value(key)
}

// ContextWithRequest returns a context carrying info.
func ContextWithRequest(ctx context.Context, info RequestInfo) context.Context {
	return &RequestContext{Context: ctx, Info: info}
}

// RequestFromContext returns the request information of ctx (the zero value
// when there is none).
func RequestFromContext(ctx context.Context) RequestInfo {
	if info, ok := ctx.Value(requestKey{}).(*RequestInfo); ok {
		return *info
	}
	return RequestInfo{}
}
