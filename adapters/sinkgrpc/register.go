package sinkgrpc

import (
	"math"
	"runtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/reflection"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// ServiceName is the fully qualified name of the Sink gRPC service (also its
// health-check service name).
const ServiceName = "sink.v1.Sink"

// RequestLimit bounds one request message of the Sink API.
type RequestLimit struct {
	// Bytes is the largest request message the server decodes. A larger
	// one fails with RESOURCE_EXHAUSTED: "request message of N bytes is
	// larger than the server accepts (Bytes); " followed by Hint.
	//
	// grpc-go itself refuses messages larger than twice Bytes before they
	// are read (so that a client cannot make the server buffer more),
	// with its own status message, which no handler or interceptor can
	// change: grpc-go sends that status itself. Between Bytes and twice
	// Bytes the server reads the message and answers with the message
	// above.
	Bytes int
	// Hint says which setting bounds requests, e.g. "SINK_MAX_REQUEST_BYTES
	// bounds the keys and documents of one request".
	Hint string
}

// grpcLimit is the receive limit given to grpc-go: twice Bytes (see Bytes).
func (l RequestLimit) grpcLimit() int { return int(min(2*int64(l.Bytes), math.MaxInt32)) }

// NewGRPCServer returns a gRPC server with the Sink API, the standard health
// service and server reflection registered. limit bounds one received
// message (requests above it get RESOURCE_EXHAUSTED).
//
// The server keeps StreamWorkers() goroutines that serve one stream after
// the other: a request's call path (interceptors, validation, the
// application, storage) is deep, and a fresh goroutine per stream would
// grow its stack on every request (about a sixth of a single put's server
// time; under load, 9-12 % of all processor time). Streams beyond the busy
// workers still get their own goroutine.
//
// The server's buffers come from a boundedPool, which keeps at most
// boundedPoolMaxBytes of freed buffers (see bufpool.go).
func NewGRPCServer(api sinkv1.SinkServer, hs *health.Server, limit RequestLimit, opts ...grpc.ServerOption) *grpc.Server {
	pool := newBoundedPool()
	opts = append([]grpc.ServerOption{grpc.MaxRecvMsgSize(limit.grpcLimit()), experimental.BufferPool(pool),
		grpc.ForceServerCodecV2(newRequestCodec(limit, pool)), grpc.NumStreamWorkers(StreamWorkers())}, opts...)
	s := grpc.NewServer(opts...)
	registerSink(s, api)  // sinkv1.RegisterSinkServer, with undecodable requests as INVALID_ARGUMENT (decode.go)
	registerHealth(s, hs) // healthpb.RegisterHealthServer, with Check's handler made once (decode.go)
	reflection.Register(s)
	return s
}

// StreamWorkers is the number of stream workers NewGRPCServer keeps:
// minStreamWorkers, or one per processor Go may use (GOMAXPROCS) if that
// is more. A worker is busy while its request waits for storage, so there
// must be about as many as requests in flight, not as processors: with one
// per processor, 64 clients' single puts spent 9-12 % of the process's
// processor time growing fresh goroutines' stacks, with 64 workers 1-3 %.
// An idle worker costs a small stack.
func StreamWorkers() uint32 { return uint32(max(runtime.GOMAXPROCS(0), minStreamWorkers)) }

// minStreamWorkers is the fewest stream workers a server keeps.
const minStreamWorkers = 64
