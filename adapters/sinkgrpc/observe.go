package sinkgrpc

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/domain"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// RequestIDHeader is the metadata key of the request id, read from the
// request and returned in the response header.
const RequestIDHeader = "x-request-id"

// MaxRequestIDLength bounds a client-supplied request id; longer ones, and
// ones with characters outside printable ASCII, are replaced.
const MaxRequestIDLength = 128

// RPCObserver receives one measurement per finished unary RPC (the metrics
// adapter implements it): its full method name, status code and latency.
// It must be safe for concurrent use and cheap.
type RPCObserver interface {
	RPC(method string, code codes.Code, d time.Duration)
}

// RequestIDResponse says which responses of unary RPCs return the request
// id in the x-request-id response header. Streams (Scan, the health
// check's Watch) always return it: once per stream.
type RequestIDResponse uint8

const (
	// RequestIDOnFailure returns it with the responses that report a
	// failure: an error status, or a Read, Write or Delete result with an
	// error. Those are the requests that Sink's logs name (a line per
	// failure class, or the whole-request failure); a success is logged
	// at most at debug level (an operation found already applied), and
	// its id would name nothing at info level. It is the default: on a
	// single-record call the header cost about a tenth of the server's
	// processor time (docs/benchmarks.md). A client that wants to find
	// its calls in the logs sends its own id, which the logs use.
	RequestIDOnFailure RequestIDResponse = iota
	// RequestIDAlways returns it with every response.
	RequestIDAlways
)

// InterceptorOption configures UnaryInterceptor.
type InterceptorOption func(*interceptorOptions)

type interceptorOptions struct {
	requestID RequestIDResponse
}

// WithRequestIDResponse sets which unary responses return the request id
// (default RequestIDOnFailure).
func WithRequestIDResponse(r RequestIDResponse) InterceptorOption {
	return func(o *interceptorOptions) { o.requestID = r }
}

// UnaryInterceptor returns the interceptor that makes every unary RPC
// observable. It must be the outermost interceptor. It
//   - takes the request id from the x-request-id metadata, or generates one
//     when there is none (or it is unusable), and returns it in the
//     x-request-id response header when the response reports a failure
//     (or always: see RequestIDResponse, WithRequestIDResponse);
//   - puts the request id and the method into the context
//     (domain.ContextWithRequest), where the application finds them for its
//     logs;
//   - reports the RPC's method, code and latency to obs (when not nil);
//   - logs whole-request failures (status errors) with the request id: at
//     error level for codes that point at Sink itself (Internal, Unknown,
//     DataLoss), warning for Unavailable and DeadlineExceeded, info for the
//     rest (the client's doing, including rate limiting), debug for
//     refusals of the in-flight bound (Connections.LimitOperations).
//     Whole-request
//     messages are Sink's own (limits, credentials, rate limits; never a
//     document or a per-operation error, which the application logs
//     without its message); they are logged valid UTF-8 and at most
//     MaxLoggedMessageLength bytes long.
func UnaryInterceptor(obs RPCObserver, log *slog.Logger, opts ...InterceptorOption) grpc.UnaryServerInterceptor {
	if log == nil {
		log = slog.Default()
	}
	var o interceptorOptions
	for _, opt := range opts {
		opt(&o)
	}
	always := o.requestID == RequestIDAlways
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		rc := newRPCContext(ctx, info.FullMethod)
		id := rc.Info.ID
		resp, err := handler(&rc.RequestContext, req)
		// The header goes out with the response or the error status (see
		// sendRequestIDHeader).
		if always || err != nil || reportsFailure(resp) {
			rc.sendRequestIDHeader(ctx)
		}
		ctx = &rc.RequestContext
		code := status.Code(err)
		if obs != nil {
			obs.RPC(info.FullMethod, code, time.Since(start))
		}
		if err != nil {
			logFailedRequest(ctx, log, id, info.FullMethod, code, err, start)
		}
		return resp, err
	}
}

// StreamInterceptor does for streaming RPCs (Scan, the health check's
// Watch) what UnaryInterceptor does for unary ones: the request id (from
// x-request-id or generated) in the stream's context and in the
// x-request-id response header (sent with the first message, or with the
// status when there is none), the RPC's code and duration to obs (except
// for health Watch streams, which last as long as their client wants),
// and whole-request failures logged with the request id. It must be the
// outermost stream interceptor.
func StreamInterceptor(obs RPCObserver, log *slog.Logger) grpc.StreamServerInterceptor {
	if log == nil {
		log = slog.Default()
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		rc := newRPCContext(ss.Context(), info.FullMethod)
		rc.header[0] = rc.Info.ID
		_ = ss.SetHeader(metadata.MD{RequestIDHeader: rc.header[:]})
		err := handler(srv, withContext(ss, &rc.RequestContext))
		code := status.Code(err)
		if obs != nil && info.FullMethod != healthWatchMethod {
			obs.RPC(info.FullMethod, code, time.Since(start))
		}
		if err != nil {
			logFailedRequest(&rc.RequestContext, log, rc.Info.ID, info.FullMethod, code, err, start)
		}
		return err
	}
}

// reportsFailure reports whether resp, a unary RPC's response, has a
// result with an error.
func reportsFailure(resp any) bool {
	switch r := resp.(type) {
	case *sinkv1.WriteResponse:
		return anyError(r.GetResults())
	case *sinkv1.ReadResponse:
		return anyError(r.GetResults())
	case *sinkv1.DeleteResponse:
		return anyError(r.GetResults())
	}
	return false
}

func anyError[R interface{ GetError() *sinkv1.OperationError }](results []R) bool {
	for _, r := range results {
		if r.GetError() != nil {
			return true
		}
	}
	return false
}

// logFailedRequest logs a whole-request failure (see UnaryInterceptor).
// It is a function of its own so that the interceptor's frame, on every
// request's stack, stays small.
func logFailedRequest(ctx context.Context, log *slog.Logger, id, method string, code codes.Code, err error, start time.Time) {
	level := slog.LevelInfo
	switch code {
	case codes.Internal, codes.Unknown, codes.DataLoss:
		level = slog.LevelError
	case codes.Unavailable, codes.DeadlineExceeded:
		level = slog.LevelWarn
	case codes.ResourceExhausted:
		if strings.HasPrefix(status.Convert(err).Message(), overloadMessage) {
			// Under overload refusals are most requests: logging each
			// would add to the load (metrics count them).
			level = slog.LevelDebug
		}
	}
	if !log.Enabled(ctx, level) {
		return
	}
	log.LogAttrs(ctx, level, "request failed: "+code.String(),
		slog.String("request_id", id),
		slog.String("rpc", method),
		slog.String("code", code.String()),
		slog.String("message", loggedMessage(status.Convert(err).Message())),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
	)
}

// sendRequestIDHeader sends the response header with x-request-id set to
// the request's id. It is called when the handler has returned, right
// before grpc-go encodes and sends the response (or the error status), so
// the header is queued with them, as it was when it was set (SetHeader)
// before the handler and sent with the response; headers the handler set
// are sent with it.
//
// grpc.SetHeader merges what it is given into metadata of the stream's
// own (metadata.Join: a map, its entries and the value's slice: three
// allocations, and a fourth when the header's field list grows). SendHeader
// takes the metadata as the stream's header when the handler set none,
// and keeps it: so it is a map of its own per request (two allocations),
// whose value slice is the request's rpcContext's.
func (rc *rpcContext) sendRequestIDHeader(ctx context.Context) {
	rc.header[0] = rc.Info.ID // the key is lower case already
	_ = grpc.SendHeader(ctx, metadata.MD{RequestIDHeader: rc.header[:]})
}

// MaxLoggedMessageLength bounds the whole-request error message logged.
const MaxLoggedMessageLength = 512

// loggedMessage returns msg as valid UTF-8 of at most MaxLoggedMessageLength bytes.
func loggedMessage(msg string) string {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	if len(msg) <= MaxLoggedMessageLength {
		return msg
	}
	cut := MaxLoggedMessageLength
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// rpcContext is the context the interceptor gives a request: ctx with
// the request's id and method (domain.ContextWithRequest), and the bytes
// of a generated id, in one allocation (a context.WithValue and a
// generated id took three).
type rpcContext struct {
	domain.RequestContext
	id [2 * requestIDBytes]byte
	// header is the value of the x-request-id response header.
	header [1]string
}

// newRPCContext returns the context of a call of method with ctx: its id
// is the client's usable x-request-id, or a new one.
func newRPCContext(ctx context.Context, method string) *rpcContext {
	rc := &rpcContext{RequestContext: domain.RequestContext{Context: ctx, Info: domain.RequestInfo{Method: method}}}
	// ValueFromIncomingContext reads the one header; FromIncomingContext
	// would copy every header of the call first.
	for _, v := range metadata.ValueFromIncomingContext(ctx, RequestIDHeader) {
		if usableRequestID(v) {
			rc.Info.ID = v
			return rc
		}
	}
	newRequestID(&rc.id)
	// The bytes are written once, above, and never again: the string
	// may share them (it keeps rc alive while it lives).
	rc.Info.ID = unsafe.String(&rc.id[0], len(rc.id))
	return rc
}

func usableRequestID(v string) bool {
	if v == "" || len(v) > MaxRequestIDLength {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] > '~' {
			return false
		}
	}
	return true
}

// NewRequestID returns a random request id (32 hexadecimal digits). A
// request id correlates logs and is no secret: it comes from the runtime's
// fast random generator, not from the operating system's (a system call
// per request).
func NewRequestID() string {
	var id [2 * requestIDBytes]byte
	newRequestID(&id)
	return string(id[:])
}

// requestIDBytes is the number of random bytes of a generated request id.
const requestIDBytes = 16

// newRequestID writes a random request id into id (see NewRequestID).
func newRequestID(id *[2 * requestIDBytes]byte) {
	var b [requestIDBytes]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	hex.Encode(id[:], b[:])
}
