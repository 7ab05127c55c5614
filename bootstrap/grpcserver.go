package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/keepalive"

	sinkgrpc "github.com/sink-io/sink/adapters/grpc"
)

// GRPCConfig bounds the resources one client can hold on the gRPC API:
// streams, connection lifetime, keepalive pings, handshakes and health
// watchers (see docs/security.md).
type GRPCConfig struct {
	MaxConcurrentStreams  int           `env:"SINK_GRPC_MAX_CONCURRENT_STREAMS" envDefault:"100" desc:"Most concurrent calls (HTTP/2 streams) on one gRPC connection; the client queues the others."`
	MaxConnectionIdle     time.Duration `env:"SINK_GRPC_MAX_CONNECTION_IDLE" envDefault:"5m" desc:"A gRPC connection without calls for this long is closed gracefully (0 = never); clients reconnect transparently."`
	MaxConnectionAge      time.Duration `env:"SINK_GRPC_MAX_CONNECTION_AGE" envDefault:"30m" desc:"A gRPC connection older than this (plus or minus 10% jitter) is asked to go away, so that clients reconnect and spread over replicas (0 = never)."`
	MaxConnectionAgeGrace time.Duration `env:"SINK_GRPC_MAX_CONNECTION_AGE_GRACE" envDefault:"1m" desc:"How long the calls of a connection that reached SINK_GRPC_MAX_CONNECTION_AGE may still run before it is closed."`
	KeepaliveMinTime      time.Duration `env:"SINK_GRPC_KEEPALIVE_MIN_TIME" envDefault:"10s" desc:"Shortest interval at which clients may send keepalive pings (also on idle connections); clients that ping more often are disconnected (GOAWAY too_many_pings)."`
	HandshakeTimeout      time.Duration `env:"SINK_GRPC_HANDSHAKE_TIMEOUT" envDefault:"10s" desc:"How long a new gRPC connection may take to finish its TLS handshake and HTTP/2 preface before it is closed."`
	MaxHealthWatchers     int           `env:"SINK_GRPC_MAX_HEALTH_WATCHERS" envDefault:"1000" desc:"Most health Watch streams open at once, server-wide (they need no credentials); more are refused with RESOURCE_EXHAUSTED."`
}

// validate reports every problem of the gRPC server limits.
func (g GRPCConfig) validate(unparsed map[string]bool) error {
	var errs []error
	for _, x := range []struct {
		name string
		v    int
	}{
		{"SINK_GRPC_MAX_CONCURRENT_STREAMS", g.MaxConcurrentStreams},
		{"SINK_GRPC_MAX_HEALTH_WATCHERS", g.MaxHealthWatchers},
	} {
		if x.v <= 0 && !unparsed[x.name] {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", x.name, x.v))
		}
	}
	for _, x := range []struct {
		name     string
		v        time.Duration
		zeroOkay bool
	}{
		{"SINK_GRPC_MAX_CONNECTION_IDLE", g.MaxConnectionIdle, true},
		{"SINK_GRPC_MAX_CONNECTION_AGE", g.MaxConnectionAge, true},
		{"SINK_GRPC_MAX_CONNECTION_AGE_GRACE", g.MaxConnectionAgeGrace, true},
		{"SINK_GRPC_KEEPALIVE_MIN_TIME", g.KeepaliveMinTime, false},
		{"SINK_GRPC_HANDSHAKE_TIMEOUT", g.HandshakeTimeout, false},
	} {
		switch {
		case unparsed[x.name]:
		case x.zeroOkay && x.v < 0:
			errs = append(errs, fmt.Errorf("%s must not be negative (0 = never), got %s", x.name, x.v))
		case !x.zeroOkay && x.v <= 0:
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", x.name, x.v))
		}
	}
	return errors.Join(errs...)
}

// serverOptions returns the gRPC server options of the limits.
func (g GRPCConfig) serverOptions() []grpc.ServerOption {
	kp := keepalive.ServerParameters{MaxConnectionIdle: g.MaxConnectionIdle, MaxConnectionAge: g.MaxConnectionAge, MaxConnectionAgeGrace: g.MaxConnectionAgeGrace}
	// gRPC reads 0 as "the default", not "never": never is infinity.
	const never = time.Duration(1<<63 - 1)
	for _, d := range []*time.Duration{&kp.MaxConnectionIdle, &kp.MaxConnectionAge, &kp.MaxConnectionAgeGrace} {
		if *d == 0 {
			*d = never
		}
	}
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(min(g.MaxConcurrentStreams, 1<<31))),
		grpc.KeepaliveParams(kp),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: g.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.ConnectionTimeout(g.HandshakeTimeout),
	}
}

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

// grpcServer is the gRPC server with what its shutdown needs.
type grpcServer struct {
	srv     *grpc.Server
	conns   *sinkgrpc.Connections
	streams *sinkgrpc.StreamCloser
}

// newGRPCServer assembles the gRPC server: the observability interceptor
// first (the outermost, observability.go), then the security options
// (security.go), the stream closer with the health-watcher bound, the
// connection tracker and the limits of GRPCConfig.
func newGRPCServer(p grpcServerParams) *grpcServer {
	g := &grpcServer{conns: sinkgrpc.NewConnections(p.Log), streams: sinkgrpc.NewStreamCloser(p.Config.GRPC.MaxHealthWatchers)}
	opts := append(append([]grpc.ServerOption{}, p.Observability.Options...), p.Security.Options...)
	opts = append(opts, grpc.ChainStreamInterceptor(g.streams.Interceptor()), grpc.StatsHandler(g.conns))
	opts = append(opts, p.Config.GRPC.serverOptions()...)
	g.srv = sinkgrpc.NewGRPCServer(p.API, p.Health, p.Config.MaxRequestBytes+1<<20, opts...)
	return g
}

// serveGRPC opens the listener in OnStart (so start-up fails clearly when
// the address is taken). OnStop turns the health service NOT_SERVING,
// ends health watchers and reflection streams, closes connections still in
// their handshake, drains in-flight RPCs with GracefulStop and, at the
// shutdown timeout, closes what is left; it fails only when accepted RPCs
// were cut off.
func serveGRPC(lc fx.Lifecycle, cfg Config, log *slog.Logger, g *grpcServer, hs *health.Server, ep *GRPCEndpoint) {
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			lis, err := net.Listen("tcp", cfg.GRPCAddress)
			if err != nil {
				return fmt.Errorf("cannot listen on SINK_GRPC_ADDRESS %q: %w", cfg.GRPCAddress, err)
			}
			ep.set(lis.Addr())
			// The serving status follows the health monitor (observability.go).
			go func() {
				if err := g.srv.Serve(g.conns.Listener(lis)); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
					log.Error("gRPC server stopped", "error", err)
				}
			}()
			log.Info("serving the Sink gRPC API", "address", lis.Addr().String(), "store", cfg.Store)
			return nil
		},
		OnStop: func(ctx context.Context) error {
			hs.Shutdown()
			// Health watchers and reflection streams would hold GracefulStop open.
			g.streams.CloseAll()
			return g.conns.Shutdown(ctx, g.srv)
		},
	})
}
