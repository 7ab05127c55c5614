package bootstrap

import (
	"log/slog"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/sink-io/sink/adapters/sinkgrpc"
)

// GRPCEndpoint is the gRPC listener; its Addr is the bound address once
// started.
type GRPCEndpoint = sinkgrpc.Listener

// grpcServerParams are the parts of the gRPC server.
type grpcServerParams struct {
	fx.In
	Config        Config
	Log           *slog.Logger
	API           *sinkgrpc.Server
	Health        *health.Server
	Security      GRPCServerOptions
	Observability GRPCObservability
}

// newGRPCListener assembles the gRPC listener: the observability
// interceptor first (the outermost, observability.go), then the security
// options (security.go) and the limits of SINK_GRPC_*.
func newGRPCListener(p grpcServerParams) *sinkgrpc.Listener {
	opts := append(append([]grpc.ServerOption{}, p.Observability.Options...), p.Security.Options...)
	limits := p.Config.GRPCLimits()
	opts = append(opts, limits.ServerOptions()...)
	return sinkgrpc.NewListener(p.API, p.Health, sinkgrpc.ListenerConfig{
		Address: p.Config.GRPCAddress, Setting: "SINK_GRPC_ADDRESS",
		RequestLimit: sinkgrpc.RequestLimit{Bytes: p.Config.MaxRequestBytes + 1<<20, Hint: p.Config.RequestLimitHint()}, MaxHealthWatchers: limits.MaxHealthWatchers,
		MaxInFlightOperations: limits.MaxInFlightOperations,
		Options:               opts, Logger: p.Log.With("store", p.Config.Store),
	})
}
