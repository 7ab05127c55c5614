package sinkgrpc

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// ServiceName is the fully qualified name of the Sink gRPC service (also its
// health-check service name).
const ServiceName = "sink.v1.Sink"

// NewGRPCServer returns a gRPC server with the Sink API, the standard health
// service and server reflection registered. maxRequestBytes bounds one
// received message (requests above it get RESOURCE_EXHAUSTED).
func NewGRPCServer(api sinkv1.SinkServer, hs *health.Server, maxRequestBytes int, opts ...grpc.ServerOption) *grpc.Server {
	opts = append([]grpc.ServerOption{grpc.MaxRecvMsgSize(maxRequestBytes), grpc.ForceServerCodecV2(newRequestCodec())}, opts...)
	s := grpc.NewServer(opts...)
	registerSink(s, api) // sinkv1.RegisterSinkServer, with undecodable requests as INVALID_ARGUMENT (decode.go)
	healthpb.RegisterHealthServer(s, hs)
	reflection.Register(s)
	return s
}
