package sinkgrpc

import (
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/sink-io/sink/internal/check"
)

// Never, as a connection lifetime of Limits (MaxConnectionIdle,
// MaxConnectionAge, MaxConnectionAgeGrace), means no limit. (gRPC itself
// reads 0 as its own default, and so do Limits: 0 is DefaultLimits' value.)
const Never = time.Duration(math.MaxInt64)

// Limits bound the resources one client can hold on the gRPC server:
// streams, connection lifetime, keepalive pings, handshakes and health
// watchers. Zero fields get DefaultLimits' values.
type Limits struct {
	// MaxConcurrentStreams is the most concurrent calls (HTTP/2 streams)
	// on one connection; the client queues the others.
	MaxConcurrentStreams int
	// MaxConnectionIdle closes a connection without calls for this long
	// (Never: no limit).
	MaxConnectionIdle time.Duration
	// MaxConnectionAge asks a connection older than this (plus or minus
	// 10% jitter) to go away (Never: no limit).
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace is how long the calls of a connection that
	// reached MaxConnectionAge may still run (Never: no limit).
	MaxConnectionAgeGrace time.Duration
	// KeepaliveMinTime is the shortest interval at which clients may send
	// keepalive pings (also without calls); clients that ping more often
	// are disconnected.
	KeepaliveMinTime time.Duration
	// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface.
	HandshakeTimeout time.Duration
	// MaxHealthWatchers is the most health Watch streams open at once,
	// server-wide (NewStreamCloser).
	MaxHealthWatchers int
	// MaxInFlightOperations bounds the operations of the Sink RPCs in
	// flight, server-wide; requests beyond it are refused at once with a
	// retryable RESOURCE_EXHAUSTED (Connections.LimitOperations).
	// Unbounded (math.MaxInt) means no bound.
	MaxInFlightOperations int
}

// Unbounded, as MaxInFlightOperations, means no bound.
const Unbounded = math.MaxInt

// DefaultMaxInFlightOperations is the default bound on the operations in
// flight (docs/operations.md, "Overload and restarts"). Measured on two
// cores (integration's BenchmarkInFlightOperations: single puts of 1 KiB,
// storage 1 ms away), throughput stops growing at a few hundred operations
// in flight (16,000-18,000 puts/s from about 250 on), while 2,300 in
// flight cost a p99 latency of 565 ms and 85 MiB more live heap, clients
// included. The default leaves room for larger machines and for four
// requests of the largest size (1,000 operations) at once; lower it for
// large documents (each operation in flight holds its document).
const DefaultMaxInFlightOperations = 4096

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	var l Limits
	l.setDefaults()
	return l
}

// setDefaults fills the zero fields with the defaults.
func (l *Limits) setDefaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if l.MaxConcurrentStreams == 0 {
		l.MaxConcurrentStreams = 100
	}
	def(&l.MaxConnectionIdle, 5*time.Minute)
	def(&l.MaxConnectionAge, 30*time.Minute)
	def(&l.MaxConnectionAgeGrace, time.Minute)
	def(&l.KeepaliveMinTime, 10*time.Second)
	def(&l.HandshakeTimeout, 10*time.Second)
	if l.MaxHealthWatchers == 0 {
		l.MaxHealthWatchers = 1000
	}
	if l.MaxInFlightOperations == 0 {
		l.MaxInFlightOperations = DefaultMaxInFlightOperations
	}
}

// Validate reports every problem of the limits at once (messages name the
// fields). Call it on defaulted limits: zero values are problems here.
func (l Limits) Validate() error {
	var p check.Problems
	p.Positive("MaxConcurrentStreams", l.MaxConcurrentStreams)
	p.Positive("MaxHealthWatchers", l.MaxHealthWatchers)
	p.Positive("MaxInFlightOperations", l.MaxInFlightOperations)
	p.PositiveDuration("MaxConnectionIdle", l.MaxConnectionIdle)
	p.PositiveDuration("MaxConnectionAge", l.MaxConnectionAge)
	p.PositiveDuration("MaxConnectionAgeGrace", l.MaxConnectionAgeGrace)
	p.PositiveDuration("KeepaliveMinTime", l.KeepaliveMinTime)
	p.PositiveDuration("HandshakeTimeout", l.HandshakeTimeout)
	return p.Err()
}

// ServerOptions returns the gRPC server options of the limits (zero
// fields get the defaults) except MaxHealthWatchers, which
// NewStreamCloser enforces, and MaxInFlightOperations, which
// Connections.LimitOperations enforces (ListenerConfig).
func (l Limits) ServerOptions() []grpc.ServerOption {
	l.setDefaults()
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(min(l.MaxConcurrentStreams, math.MaxInt32))),
		grpc.KeepaliveParams(l.keepaliveParams()),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
	}
}

// keepaliveParams returns the connection lifetimes of defaulted limits.
// gRPC's own "infinity" is math.MaxInt64 too, so Never passes through.
func (l Limits) keepaliveParams() keepalive.ServerParameters {
	return keepalive.ServerParameters{MaxConnectionIdle: l.MaxConnectionIdle, MaxConnectionAge: l.MaxConnectionAge, MaxConnectionAgeGrace: l.MaxConnectionAgeGrace}
}
