package envconfig

import (
	"errors"
	"strconv"
	"time"

	"github.com/sink-io/sink/adapters/sinkgrpc"
)

// GRPCConfig bounds the resources one client can hold on the gRPC API:
// streams, connection lifetime, keepalive pings, handshakes and health
// watchers (sinkgrpc.Limits; see docs/security.md). The defaults are
// sinkgrpc.DefaultLimits().
type GRPCConfig struct {
	MaxConcurrentStreams  int           `env:"SINK_GRPC_MAX_CONCURRENT_STREAMS" desc:"Most concurrent calls (HTTP/2 streams) on one gRPC connection; the client queues the others."`
	MaxConnectionIdle     time.Duration `env:"SINK_GRPC_MAX_CONNECTION_IDLE" desc:"A gRPC connection without calls for this long is closed gracefully (0 = never); clients reconnect transparently."`
	MaxConnectionAge      time.Duration `env:"SINK_GRPC_MAX_CONNECTION_AGE" desc:"A gRPC connection older than this (plus or minus 10% jitter) is asked to go away, so that clients reconnect and spread over replicas (0 = never)."`
	MaxConnectionAgeGrace time.Duration `env:"SINK_GRPC_MAX_CONNECTION_AGE_GRACE" desc:"How long the calls of a connection that reached SINK_GRPC_MAX_CONNECTION_AGE may still run before it is closed (0 = no limit)."`
	KeepaliveMinTime      time.Duration `env:"SINK_GRPC_KEEPALIVE_MIN_TIME" desc:"Shortest interval at which clients may send keepalive pings (also on idle connections); clients that ping more often are disconnected (GOAWAY too_many_pings)."`
	HandshakeTimeout      time.Duration `env:"SINK_GRPC_HANDSHAKE_TIMEOUT" desc:"How long a new gRPC connection may take to finish its TLS handshake and HTTP/2 preface before it is closed."`
	MaxHealthWatchers     int           `env:"SINK_GRPC_MAX_HEALTH_WATCHERS" desc:"Most health Watch streams open at once, server-wide (they need no credentials); more are refused with RESOURCE_EXHAUSTED."`
	MaxInFlightOperations int           `env:"SINK_MAX_INFLIGHT_OPERATIONS" desc:"Most operations (reads, puts, merges, deletes) of the requests a server process works on at once (0 = no bound; at least SINK_MAX_OPERATIONS). A request that would exceed it is refused at once, before any of its work, with RESOURCE_EXHAUSTED, retryable, with a retry delay (google.rpc.RetryInfo). See docs/operations.md."`
}

// grpcNames maps the fields sinkgrpc.Limits.Validate names to variables.
// In the environment 0 means never (sinkgrpc.Never), so a connection
// lifetime that Limits finds not positive was negative here.
var grpcNames = []rename{
	{"MaxConnectionIdle must be positive", "SINK_GRPC_MAX_CONNECTION_IDLE must not be negative (0 = never)"},
	{"MaxConnectionAge must be positive", "SINK_GRPC_MAX_CONNECTION_AGE must not be negative (0 = never)"},
	{"MaxConnectionAgeGrace must be positive", "SINK_GRPC_MAX_CONNECTION_AGE_GRACE must not be negative (0 = no limit)"},
	{"MaxInFlightOperations must be positive", "SINK_MAX_INFLIGHT_OPERATIONS must not be negative (0 = no bound)"},
	{"MaxConcurrentStreams", "SINK_GRPC_MAX_CONCURRENT_STREAMS"},
	{"MaxConnectionIdle", "SINK_GRPC_MAX_CONNECTION_IDLE"},
	{"MaxConnectionAge", "SINK_GRPC_MAX_CONNECTION_AGE"},
	{"MaxConnectionAgeGrace", "SINK_GRPC_MAX_CONNECTION_AGE_GRACE"},
	{"KeepaliveMinTime", "SINK_GRPC_KEEPALIVE_MIN_TIME"},
	{"HandshakeTimeout", "SINK_GRPC_HANDSHAKE_TIMEOUT"},
	{"MaxHealthWatchers", "SINK_GRPC_MAX_HEALTH_WATCHERS"},
	{"MaxInFlightOperations", "SINK_MAX_INFLIGHT_OPERATIONS"},
}

// validate reports the problems of the gRPC limits
// (sinkgrpc.Limits.Validate), naming the variables.
func (g GRPCConfig) validate(unparsed map[string]bool) error {
	return errors.Join(renamed("gRPC limits", Config{GRPC: g}.GRPCLimits().Validate(), grpcNames, unparsed)...)
}

// GRPCLimits returns the gRPC server limits (0 = never becomes
// sinkgrpc.Never, 0 = no bound sinkgrpc.Unbounded).
func (c Config) GRPCLimits() sinkgrpc.Limits {
	g := c.GRPC
	never := func(d time.Duration) time.Duration {
		if d == 0 {
			return sinkgrpc.Never
		}
		return d
	}
	return sinkgrpc.Limits{
		MaxConcurrentStreams:  g.MaxConcurrentStreams,
		MaxConnectionIdle:     never(g.MaxConnectionIdle),
		MaxConnectionAge:      never(g.MaxConnectionAge),
		MaxConnectionAgeGrace: never(g.MaxConnectionAgeGrace),
		KeepaliveMinTime:      g.KeepaliveMinTime,
		HandshakeTimeout:      g.HandshakeTimeout,
		MaxHealthWatchers:     g.MaxHealthWatchers,
		MaxInFlightOperations: unbounded(g.MaxInFlightOperations),
	}
}

// unbounded returns n, or sinkgrpc.Unbounded for 0.
func unbounded(n int) int {
	if n == 0 {
		return sinkgrpc.Unbounded
	}
	return n
}

// grpcDefaults returns the environment's form of sinkgrpc.DefaultLimits().
func grpcDefaults() GRPCConfig {
	l := sinkgrpc.DefaultLimits()
	zero := func(d time.Duration) time.Duration {
		if d == sinkgrpc.Never {
			return 0
		}
		return d
	}
	return GRPCConfig{
		MaxConcurrentStreams:  l.MaxConcurrentStreams,
		MaxConnectionIdle:     zero(l.MaxConnectionIdle),
		MaxConnectionAge:      zero(l.MaxConnectionAge),
		MaxConnectionAgeGrace: zero(l.MaxConnectionAgeGrace),
		KeepaliveMinTime:      l.KeepaliveMinTime,
		HandshakeTimeout:      l.HandshakeTimeout,
		MaxHealthWatchers:     l.MaxHealthWatchers,
		MaxInFlightOperations: l.MaxInFlightOperations,
	}
}

// RequestLimitHint names the setting that bounds requests, for the
// RESOURCE_EXHAUSTED answer to a request message above the limit (the
// message may hold up to 1 MiB beside the keys and documents: field tags,
// names, lengths).
func (c Config) RequestLimitHint() string {
	return "SINK_MAX_REQUEST_BYTES (" + strconv.Itoa(c.MaxRequestBytes) + ") bounds the keys and documents of one request"
}
