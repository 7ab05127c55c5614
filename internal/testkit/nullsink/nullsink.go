// Package nullsink is the gRPC floor of Sink's benchmarks: the Sink
// service, its requests decoded by grpc-go, one well-formed result per
// operation, and no work. Reads find a fixed 1 KB JSON document (the size
// the benchmarks write), so that responses are as large as Sink's.
package nullsink

import (
	"context"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sink-io/sink/adapters/sinkgrpc"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
	"github.com/sink-io/sink/proto/vtcodec"
)

// Server is the null Sink service.
type Server struct {
	sinkv1.UnimplementedSinkServer
}

var (
	doc      = &sinkv1.Document{ContentType: "application/json", Data: []byte(`{"payload":"` + strings.Repeat("x", 1000) + `"}`)}
	revision = []byte("0000000000000001")
)

// Read answers every operation with the fixed document.
func (Server) Read(_ context.Context, r *sinkv1.ReadRequest) (*sinkv1.ReadResponse, error) {
	out := &sinkv1.ReadResponse{Results: make([]*sinkv1.ReadResult, len(r.Operations))}
	for i := range out.Results {
		out.Results[i] = &sinkv1.ReadResult{Index: uint32(i), Status: sinkv1.OperationStatus_OPERATION_STATUS_FOUND, Document: doc, Revision: revision}
	}
	return out, nil
}

// Write answers every operation as applied.
func (Server) Write(_ context.Context, r *sinkv1.WriteRequest) (*sinkv1.WriteResponse, error) {
	out := &sinkv1.WriteResponse{Results: make([]*sinkv1.WriteResult, len(r.Operations))}
	for i := range out.Results {
		out.Results[i] = &sinkv1.WriteResult{Index: uint32(i), Status: sinkv1.OperationStatus_OPERATION_STATUS_APPLIED, Revision: revision}
	}
	return out, nil
}

// Delete answers every operation as applied.
func (Server) Delete(_ context.Context, r *sinkv1.DeleteRequest) (*sinkv1.DeleteResponse, error) {
	out := &sinkv1.DeleteResponse{Results: make([]*sinkv1.DeleteResult, len(r.Operations))}
	for i := range out.Results {
		out.Results[i] = &sinkv1.DeleteResult{Index: uint32(i), Status: sinkv1.OperationStatus_OPERATION_STATUS_APPLIED}
	}
	return out, nil
}

// Serve serves the null service on lis until the returned server stops
// (see ServeService).
func Serve(lis net.Listener) *grpc.Server { return ServeService(lis, Server{}) }

// ServeService serves svc on lis as the null service is served, until the
// returned server stops, with grpc-go's standard health service beside it
// (the whole server SERVING), as Sink serves it. It keeps as many stream
// workers as Sink's server (sinkgrpc.StreamWorkers), a transport setting
// that makes the floor faster too, so that ratios to it compare the work
// per request and not the server set-up, and Sink's codec (vtcodec), so
// that they do not compare codecs either. The owed-work floor
// (internal/testkit/worksink) is served with it too.
func ServeService(lis net.Listener, svc sinkv1.SinkServer) *grpc.Server {
	srv := grpc.NewServer(grpc.NumStreamWorkers(sinkgrpc.StreamWorkers()), grpc.ForceServerCodecV2(vtcodec.New()))
	sinkv1.RegisterSinkServer(srv, svc)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	return srv
}
