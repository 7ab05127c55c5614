package sinkgrpc

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sink-io/sink/internal/listen"
)

// ListenerConfig configures a Listener.
type ListenerConfig struct {
	// Address is the host:port to listen on.
	Address string
	// Setting names the address's setting in messages (default "the gRPC
	// address").
	Setting string
	// RequestLimit bounds one request message (NewGRPCServer).
	RequestLimit RequestLimit
	// MaxHealthWatchers bounds the health Watch streams open at once.
	MaxHealthWatchers int
	// MaxInFlightOperations bounds the operations of the Sink RPCs in
	// flight (Connections.LimitOperations; 0 or Unbounded: no bound).
	MaxInFlightOperations int
	// Options are the server options, outermost interceptors first; the
	// listener adds its stream closer and connection tracker after them.
	Options []grpc.ServerOption
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

func (c *ListenerConfig) setDefaults() {
	if c.Setting == "" {
		c.Setting = "the gRPC address"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Listener serves the Sink API, health and reflection on one address.
// Start opens the address (so that start-up fails clearly when it is
// taken) and serves in the background; Stop drains (see Stop).
type Listener struct {
	cfg     ListenerConfig
	srv     *grpc.Server
	health  *health.Server
	conns   *Connections
	streams *StreamCloser
	ep      *listen.Endpoint
}

// NewListener assembles the gRPC server of api and hs.
func NewListener(api *Server, hs *health.Server, cfg ListenerConfig) *Listener {
	cfg.setDefaults()
	l := &Listener{cfg: cfg, health: hs, conns: NewConnections(cfg.Logger), streams: NewStreamCloser(cfg.MaxHealthWatchers),
		ep: listen.NewEndpoint(cfg.Address, cfg.Setting)}
	if cfg.MaxInFlightOperations != Unbounded {
		l.conns.LimitOperations(cfg.MaxInFlightOperations)
	}
	opts := append(append([]grpc.ServerOption{}, cfg.Options...), grpc.ChainStreamInterceptor(l.streams.Interceptor()))
	l.srv = NewGRPCServer(l.conns.Track(api), hs, cfg.RequestLimit, opts...)
	return l
}

// Addr returns the address the listener bound (nil before Start).
func (l *Listener) Addr() net.Addr { return l.ep.Addr() }

// InFlight returns the Sink RPCs running and the operations they carry.
func (l *Listener) InFlight() (rpcs, operations int) {
	return l.conns.InFlight(), l.conns.InFlightOperations()
}

// Start opens the address and serves in the background.
func (l *Listener) Start(context.Context) error {
	lis, err := l.ep.Listen()
	if err != nil {
		return err
	}
	go func() {
		if err := l.srv.Serve(l.conns.Listener(lis)); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			l.cfg.Logger.Error("gRPC server stopped", "error", err)
		}
	}()
	l.cfg.Logger.Info("serving the Sink gRPC API", "address", lis.Addr().String())
	return nil
}

// Stop turns the health service NOT_SERVING, ends health watchers and
// reflection streams (they would hold a graceful stop open), closes
// connections still in their handshake, drains in-flight RPCs and, when
// ctx ends, closes what is left; it fails only when accepted RPCs were cut
// off.
func (l *Listener) Stop(ctx context.Context) error {
	l.health.Shutdown()
	l.streams.CloseAll()
	return l.conns.Shutdown(ctx, l.srv)
}

// SetServing sets the health status of the whole server ("") and of the
// Sink service: SERVING when ready, NOT_SERVING otherwise.
func SetServing(hs *health.Server, ready bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	hs.SetServingStatus("", st)
	hs.SetServingStatus(ServiceName, st)
}
