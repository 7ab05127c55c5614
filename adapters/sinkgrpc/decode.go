package sinkgrpc

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
	"github.com/sink-io/sink/proto/vtcodec"
)

// A Sink request that cannot be decoded is the client's fault and fails
// with INVALID_ARGUMENT. The usual cause is a string field (store,
// namespace, dataset, string key, profile, content type) holding invalid
// UTF-8, which the protobuf runtime refuses; another is malformed wire data.
//
// grpc-go cannot be told so directly: it decodes a unary request before any
// interceptor runs, turns every codec error into INTERNAL ("grpc: failed to
// unmarshal the received message") and sends that status itself. So the
// server codec (requestCodec) does not report the failure of a Sink request
// to grpc-go: it leaves the request empty and notes the error for that
// request message, and the Sink method handlers (registerSink) look the note
// up right after decoding and answer INVALID_ARGUMENT without running the
// method. Both are installed together by NewGRPCServer; every other message
// (health, reflection) decodes exactly as with the default codec.

// undecodable holds the decoding error of each Sink request message that
// requestCodec could not decode, until its handler takes it (at once, in
// the same call): it never holds more than the requests being decoded.
var undecodable sync.Map // request message pointer -> error

// requestCodec is the server codec: Sink's codec (vtcodec, protobuf's wire
// format) with its buffers (a request assembled from several frames, a
// response) from the server's pool (see boundedPool) instead of grpc-go's
// default pool, except that it notes (see undecodable) instead of
// returning the error of a Sink request that cannot be decoded, and notes
// a Sink request message larger than the limit without decoding it (the
// status it notes is answered as it is).
type requestCodec struct {
	encoding.CodecV2
	limit RequestLimit
}

func newRequestCodec(limit RequestLimit, pool mem.BufferPool) requestCodec {
	return requestCodec{vtcodec.WithPool(pool), limit}
}

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	sink := false
	switch v.(type) {
	case *sinkv1.ReadRequest, *sinkv1.WriteRequest, *sinkv1.DeleteRequest, *sinkv1.ScanRequest, *sinkv1.CountRequest:
		sink = true
		if n := data.Len(); n > c.limit.Bytes {
			undecodable.Store(v, c.tooLarge(n))
			return nil
		}
	}
	err := c.CodecV2.Unmarshal(data, v)
	if err == nil || !sink {
		return err
	}
	proto.Reset(v.(proto.Message))
	undecodable.Store(v, err)
	return nil
}

// tooLarge is the status of a request message of n bytes, above the limit.
func (c requestCodec) tooLarge(n int) error {
	msg := fmt.Sprintf("request message of %d bytes is larger than the server accepts (%d bytes)", n, c.limit.Bytes)
	if c.limit.Hint != "" {
		msg += "; " + c.limit.Hint
	}
	return status.Error(codes.ResourceExhausted, msg)
}

// registerSink registers the Sink API on s like sinkv1.RegisterSinkServer,
// with each method answering INVALID_ARGUMENT for a request that
// requestCodec could not decode.
func registerSink(s grpc.ServiceRegistrar, api sinkv1.SinkServer) {
	desc := sinkv1.Sink_ServiceDesc
	desc.Methods = make([]grpc.MethodDesc, len(sinkv1.Sink_ServiceDesc.Methods))
	for i, m := range sinkv1.Sink_ServiceDesc.Methods {
		desc.Methods[i] = grpc.MethodDesc{MethodName: m.MethodName, Handler: rejectUndecodable(m.Handler)}
	}
	s.RegisterService(&desc, api)
}

func rejectUndecodable(h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		return h(srv, ctx, func(v any) error {
			err := dec(v)
			if cause, ok := undecodable.LoadAndDelete(v); ok {
				if _, ok := status.FromError(cause.(error)); ok {
					return cause.(error) // (tooLarge)
				}
				return undecodableError(cause.(error))
			}
			return err
		}, interceptor)
	}
}

func undecodableError(cause error) error {
	return status.Error(codes.InvalidArgument, validMessage(
		"malformed request: it is not a valid encoding of the request message "+
			"(string fields such as store, namespace, dataset, string keys, profile and content type must be valid UTF-8): "+
			cause.Error()))
}

// decodeFailure is the status of a streamed request message requestCodec
// noted as undecodable (the stream handler looks it up itself).
func decodeFailure(cause error) error {
	if _, ok := status.FromError(cause); ok {
		return cause // (tooLarge)
	}
	return undecodableError(cause)
}
