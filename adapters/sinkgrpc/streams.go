package sinkgrpc

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// healthWatchMethod is the health service's server-streaming method.
const healthWatchMethod = "/grpc.health.v1.Health/Watch"

// StreamCloser ends long-lived server streams (health Watch, reflection)
// when shutdown begins, and bounds the health Watch streams open at once.
// The Sink API itself is unary; without this, one client watching health
// would hold GracefulStop until the shutdown timeout, and unauthenticated
// clients could open watchers without limit (each costs a goroutine and
// buffers).
type StreamCloser struct {
	maxWatchers int64
	watchers    atomic.Int64

	mu      sync.Mutex
	closed  bool
	next    uint64
	cancels map[uint64]context.CancelFunc
}

// NewStreamCloser returns a StreamCloser with no streams that admits at
// most maxHealthWatchers health Watch streams at once, server-wide (more
// are refused with RESOURCE_EXHAUSTED; 0 or less means no limit).
func NewStreamCloser(maxHealthWatchers int) *StreamCloser {
	return &StreamCloser{maxWatchers: int64(maxHealthWatchers), cancels: map[uint64]context.CancelFunc{}}
}

// Interceptor gives every stream a context that CloseAll cancels, and
// refuses health watchers above the bound.
func (c *StreamCloser) Interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if info.FullMethod == healthWatchMethod && c.maxWatchers > 0 {
			if c.watchers.Add(1) > c.maxWatchers {
				c.watchers.Add(-1)
				return status.Errorf(codes.ResourceExhausted, "too many health watchers: at most %d at once; use Check, or retry later", c.maxWatchers)
			}
			defer c.watchers.Add(-1)
		}
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

// HealthWatchers returns how many health Watch streams are open.
func (c *StreamCloser) HealthWatchers() int { return int(c.watchers.Load()) }

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

// Connections tracks a gRPC server's connections and in-flight Sink RPCs so
// that a shutdown can drain what matters and close the rest:
//
//   - Listener wraps the listener: it knows every accepted connection, and
//     which ones have not finished their handshake (TLS and HTTP/2
//     preface). grpc-go's Stop and GracefulStop wait for those handshakes
//     (up to the connection timeout), so a few stalled TCP connections would
//     otherwise hold every shutdown;
//   - Track counts the Sink RPCs and their operations in flight, and
//     refuses requests beyond the bound of LimitOperations.
//
// It is not a stats.Handler on purpose: with any stats handler installed,
// grpc-go builds an event for every header, message and trailer of every
// RPC and copies the RPC's metadata for it, whether the handler looks at
// them or not (about a tenth of a single put's server time).
type Connections struct {
	log *slog.Logger

	mu          sync.Mutex
	closing     bool
	handshaking map[*trackedConn]struct{}

	adm  *admission
	idle *idleCollector
}

// NewConnections returns a tracker with no connections.
func NewConnections(log *slog.Logger) *Connections {
	if log == nil {
		log = slog.Default()
	}
	return &Connections{log: log, handshaking: map[*trackedConn]struct{}{}, adm: newAdmission(), idle: newIdleCollector()}
}

// LimitOperations bounds the operations of the Sink RPCs in flight (the
// reads, puts, merges and deletes of the requests whose handlers run): a
// request that would take them over max is refused at once with a
// retryable RESOURCE_EXHAUSTED status carrying a google.rpc.RetryInfo
// delay (about the time the operations in flight take to drain, at the
// rate at which they recently finished, jittered), before any of its work
// is done; a request alone is admitted whatever its size. max <= 0 (the
// default) means no bound. Call it before serving.
func (c *Connections) LimitOperations(max int) {
	if max <= 0 {
		c.adm.max = math.MaxInt64
		return
	}
	c.adm.max = int64(max)
}

// Listener returns lis with every accepted connection tracked. Once
// Shutdown has begun, connections it still accepts are closed at once.
func (c *Connections) Listener(lis net.Listener) net.Listener {
	return &trackingListener{Listener: lis, c: c}
}

type trackingListener struct {
	net.Listener
	c *Connections
}

func (l *trackingListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := l.c.add(conn); tc != nil {
			return tc, nil
		}
	}
}

// trackedConn is an accepted connection, handshaking until its deadline
// is cleared or it closes.
type trackedConn struct {
	net.Conn
	c    *Connections
	once sync.Once
}

func (t *trackedConn) Close() error {
	t.once.Do(func() { t.c.forget(t) })
	return t.Conn.Close()
}

// SetDeadline is how a connection's handshake is seen to end: grpc-go's
// Server bounds the handshake (TLS, then the HTTP/2 preface and settings)
// with a deadline on the accepted connection and clears it, with the zero
// time, as soon as the handshake is over, whether it succeeded or not
// (Server.handleRawConn; grpc's own xDS server reads the handshake's
// deadline from the same call). Nothing else clears a server connection's
// deadline.
// TestShutdownClosesHalfOpenConnectionsAndIdleStreams fails if a gRPC
// release stops doing so.
func (t *trackedConn) SetDeadline(d time.Time) error {
	if d.IsZero() {
		t.c.forget(t)
	}
	return t.Conn.SetDeadline(d)
}

func (c *Connections) add(conn net.Conn) *trackedConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		_ = conn.Close()
		return nil
	}
	tc := &trackedConn{Conn: conn, c: c}
	c.handshaking[tc] = struct{}{}
	return tc
}

// forget drops tc from the handshaking connections (its handshake ended,
// or it closed).
func (c *Connections) forget(tc *trackedConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.handshaking, tc)
}

// Handshaking returns how many accepted connections have not finished
// their handshake.
func (c *Connections) Handshaking() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.handshaking)
}

// InFlight returns how many Sink RPCs are running (from when their
// handler is called until it returns).
func (c *Connections) InFlight() int { return c.adm.rpcs() }

// InFlightOperations returns how many operations the Sink RPCs in flight
// carry.
func (c *Connections) InFlightOperations() int { return c.adm.operations() }

// Track returns api with its RPCs and their operations counted in flight
// while they run, requests beyond the bound of LimitOperations refused,
// and a garbage collection when requests stop coming (idleCollector);
// serve what it returns. (Counting and admitting here rather than
// in an interceptor keeps the server's chain at one interceptor: a chain
// of two costs an allocation per RPC. Both cost one atomic addition per
// RPC on the way in and one on the way out, plus one for the drain rate.)
func (c *Connections) Track(api sinkv1.SinkServer) sinkv1.SinkServer {
	return &trackedAPI{SinkServer: api, adm: c.adm, idle: c.idle}
}

// trackedAPI counts the RPCs of the API it wraps while they run, and
// admits them. Every Sink RPC has a method here
// (TestTrackCountsEverySinkRPC).
type trackedAPI struct {
	sinkv1.SinkServer
	adm  *admission
	idle *idleCollector
}

func (t *trackedAPI) Read(ctx context.Context, req *sinkv1.ReadRequest) (*sinkv1.ReadResponse, error) {
	t.idle.request()
	n := len(req.GetOperations())
	if err := t.adm.enter(n); err != nil {
		return nil, err
	}
	defer t.adm.leave(n)
	return t.SinkServer.Read(ctx, req)
}

func (t *trackedAPI) Write(ctx context.Context, req *sinkv1.WriteRequest) (*sinkv1.WriteResponse, error) {
	t.idle.request()
	n := len(req.GetOperations())
	if err := t.adm.enter(n); err != nil {
		return nil, err
	}
	defer t.adm.leave(n)
	return t.SinkServer.Write(ctx, req)
}

func (t *trackedAPI) Delete(ctx context.Context, req *sinkv1.DeleteRequest) (*sinkv1.DeleteResponse, error) {
	t.idle.request()
	n := len(req.GetOperations())
	if err := t.adm.enter(n); err != nil {
		return nil, err
	}
	defer t.adm.leave(n)
	return t.SinkServer.Delete(ctx, req)
}

// Count is admitted as one operation (its records are charged by the
// application's admission, per storage read).
func (t *trackedAPI) Count(ctx context.Context, req *sinkv1.CountRequest) (*sinkv1.CountResponse, error) {
	t.idle.request()
	if err := t.adm.enter(1); err != nil {
		return nil, err
	}
	defer t.adm.leave(1)
	return t.SinkServer.Count(ctx, req)
}

// Scan is admitted and counted as one operation too; StreamCloser.CloseAll
// ends it at shutdown.
func (t *trackedAPI) Scan(req *sinkv1.ScanRequest, stream sinkv1.Sink_ScanServer) error {
	t.idle.request()
	if err := t.adm.enter(1); err != nil {
		return err
	}
	defer t.adm.leave(1)
	return t.SinkServer.Scan(req, stream)
}

// Shutdown stops srv gracefully, in this order: connections still in
// their handshake are closed (they carry no RPC) and new ones are refused;
// then GracefulStop stops accepting, lets in-flight RPCs finish and closes
// idle connections. When ctx ends first, everything left is closed with
// Stop. It returns an error only when accepted Sink RPCs were cut off;
// closing idle connections, half-open handshakes and watch streams is a
// clean shutdown. Cancel long-lived streams (StreamCloser.CloseAll) first.
func (c *Connections) Shutdown(ctx context.Context, srv *grpc.Server) error {
	c.mu.Lock()
	c.closing = true
	var stalled []*trackedConn
	for tc := range c.handshaking {
		stalled = append(stalled, tc)
	}
	c.mu.Unlock()
	for _, tc := range stalled {
		_ = tc.Close()
	}
	if len(stalled) > 0 {
		c.log.Info("closed connections that had not finished their handshake", "connections", len(stalled))
	}
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	cut := c.adm.rpcs()
	srv.Stop()
	if cut > 0 {
		return fmt.Errorf("cannot drain %d in-flight RPCs before the shutdown timeout: %w", cut, ctx.Err())
	}
	c.log.Info("closed the connections left after draining every in-flight RPC")
	return nil
}
