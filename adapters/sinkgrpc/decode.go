package sinkgrpc

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
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
// requestCodec could not decode. The unary methods' handlers are made
// once (unaryHandler): the generated ones allocate the interceptor's
// UnaryServerInfo and handler on every call.
func registerSink(s grpc.ServiceRegistrar, api sinkv1.SinkServer) {
	handlers := map[string]grpc.MethodHandler{
		"Read":   unaryHandler(api, sinkv1.Sink_Read_FullMethodName, api.Read, true),
		"Write":  unaryHandler(api, sinkv1.Sink_Write_FullMethodName, api.Write, true),
		"Delete": unaryHandler(api, sinkv1.Sink_Delete_FullMethodName, api.Delete, true),
		"Count":  unaryHandler(api, sinkv1.Sink_Count_FullMethodName, api.Count, true),
	}
	desc := sinkv1.Sink_ServiceDesc
	desc.Methods = make([]grpc.MethodDesc, len(sinkv1.Sink_ServiceDesc.Methods))
	for i, m := range sinkv1.Sink_ServiceDesc.Methods {
		h, ok := handlers[m.MethodName]
		if !ok { // a method added to the API since
			h = rejectUndecodable(m.Handler)
		}
		desc.Methods[i] = grpc.MethodDesc{MethodName: m.MethodName, Handler: h}
	}
	s.RegisterService(&desc, api)
}

// registerHealth registers hs as the standard health service, like
// healthpb.RegisterHealthServer, with Check's handler made once
// (unaryHandler).
func registerHealth(s grpc.ServiceRegistrar, hs healthpb.HealthServer) {
	desc := healthpb.Health_ServiceDesc
	desc.Methods = make([]grpc.MethodDesc, len(healthpb.Health_ServiceDesc.Methods))
	for i, m := range healthpb.Health_ServiceDesc.Methods {
		if m.MethodName == "Check" {
			m.Handler = unaryHandler(hs, healthpb.Health_Check_FullMethodName, hs.Check, false)
		}
		desc.Methods[i] = m
	}
	s.RegisterService(&desc, hs)
}

// unaryHandler returns the handler of the unary method fullMethod of srv,
// which call implements, as grpc-go's generated handlers do it, except
// that the interceptor's UnaryServerInfo and handler are made once here
// instead of on every call. With sink, a request that requestCodec could
// not decode is answered as registerSink says.
func unaryHandler[Req any, Resp any](srv any, fullMethod string, call func(context.Context, *Req) (Resp, error), sink bool) grpc.MethodHandler {
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}
	handler := func(ctx context.Context, req any) (any, error) { return call(ctx, req.(*Req)) }
	return func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(Req)
		err := dec(in)
		if sink {
			err = decoded(in, err)
		}
		if err != nil {
			return nil, err
		}
		if interceptor == nil {
			return call(ctx, in)
		}
		return interceptor(ctx, in, info, handler)
	}
}

// rejectUndecodable wraps a generated method handler as registerSink says.
func rejectUndecodable(h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		return h(srv, ctx, func(v any) error { return decoded(v, dec(v)) }, interceptor)
	}
}

// decoded returns the error of decoding the Sink request v (err: what
// grpc-go's decoding returned): the status of what requestCodec noted
// for v, if it noted anything.
func decoded(v any, err error) error {
	if cause, ok := undecodable.LoadAndDelete(v); ok {
		if _, ok := status.FromError(cause.(error)); ok {
			return cause.(error) // (tooLarge)
		}
		return undecodableError(cause.(error))
	}
	return err
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
