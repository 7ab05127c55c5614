package sinkgrpc

import (
	"context"
	"sync"

	"google.golang.org/grpc"
)

// StreamCloser ends long-lived server streams (health Watch, reflection)
// when shutdown begins. The Sink API itself is unary; without this, one
// client watching health would hold GracefulStop until the shutdown timeout.
type StreamCloser struct {
	mu      sync.Mutex
	closed  bool
	next    uint64
	cancels map[uint64]context.CancelFunc
}

// NewStreamCloser returns a StreamCloser with no streams.
func NewStreamCloser() *StreamCloser {
	return &StreamCloser{cancels: map[uint64]context.CancelFunc{}}
}

// Interceptor gives every stream a context that CloseAll cancels.
func (c *StreamCloser) Interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, cancel := context.WithCancel(ss.Context())
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			cancel()
			return handler(srv, withContext(ss, ctx))
		}
		id := c.next
		c.next++
		c.cancels[id] = cancel
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			delete(c.cancels, id)
			c.mu.Unlock()
			cancel()
		}()
		return handler(srv, withContext(ss, ctx))
	}
}

// CloseAll cancels every open stream and every stream opened later.
func (c *StreamCloser) CloseAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, cancel := range c.cancels {
		cancel()
	}
}

// withContext returns ss with its context replaced by ctx (interceptors
// that derive a stream's context use it).
func withContext(ss grpc.ServerStream, ctx context.Context) grpc.ServerStream {
	return &ctxStream{ServerStream: ss, ctx: ctx}
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }
