// Package sinktest starts an in-process Sink for the tests of services
// that use it: the same assembly as the sink binary (memory storage by
// default, or any ports.Storage), listening on a free loopback port, with
// a ready client.Client.
//
//	func TestOrders(t *testing.T) {
//		c := sinktest.New(t)
//		svc := orders.NewService(c)
//		…
//	}
//
// Everything started is stopped in t.Cleanup. Import sinktest from tests
// only.
package sinktest

import (
	"context"
	"errors"
	"io"
	"maps"
	"testing"
	"time"

	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/client"
	"github.com/sink-io/sink/ports"
)

type options struct {
	env        map[string]string
	storage    ports.Storage
	profiles   []ports.MergeProfile
	clientOpts []client.Option
	logs       io.Writer
}

// Option configures the in-process Sink.
type Option func(*options)

// WithStorage serves from s instead of the memory store.
func WithStorage(s ports.Storage) Option { return func(o *options) { o.storage = s } }

// WithProfiles registers merge profiles beside the built-in ones.
func WithProfiles(p ...ports.MergeProfile) Option {
	return func(o *options) { o.profiles = append(o.profiles, p...) }
}

// WithEnv sets a SINK_* variable of the server's configuration (for
// example SINK_MAX_OPERATIONS or SINK_STORE). The process environment is
// never read.
func WithEnv(name, value string) Option { return func(o *options) { o.env[name] = value } }

// WithClientOptions adds options to the clients New and Server.Client
// return (WithInsecure is always there).
func WithClientOptions(opts ...client.Option) Option {
	return func(o *options) { o.clientOpts = append(o.clientOpts, opts...) }
}

// WithLogs sends the server's log to w (by default it is discarded).
func WithLogs(w io.Writer) Option { return func(o *options) { o.logs = w } }

// Server is a running in-process Sink.
type Server struct {
	p          *bootstrap.InProcess
	addr       string
	clientOpts []client.Option
}

// NewServer starts an in-process Sink; stop it with Close. Tests use New
// or Start, which stop it themselves; NewServer is for examples and
// TestMain.
func NewServer(opts ...Option) (*Server, error) {
	o := options{env: map[string]string{"SINK_SHUTDOWN_TIMEOUT": "10s"}}
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := bootstrap.StartInProcess(ctx, bootstrap.InProcessOptions{
		Env: maps.Clone(o.env), Storage: o.storage, Profiles: o.profiles, LogWriter: o.logs,
	})
	if err != nil {
		return nil, err
	}
	if p.GRPCAddr() == "" {
		_ = p.Stop(ctx)
		return nil, errors.New("sinktest: the configuration serves no gRPC API (SINK_MODE=worker?)")
	}
	return &Server{p: p, addr: p.GRPCAddr(), clientOpts: o.clientOpts}, nil
}

// Start starts an in-process Sink stopped in t.Cleanup.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := NewServer(opts...)
	if err != nil {
		t.Fatalf("sinktest: cannot start Sink: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("sinktest: cannot stop Sink: %v", err)
		}
	})
	return s
}

// New starts an in-process Sink and returns a client connected to it;
// both are closed in t.Cleanup.
func New(t testing.TB, opts ...Option) *client.Client {
	t.Helper()
	return Start(t, opts...).NewClient(t)
}

// Addr returns the server's gRPC address (127.0.0.1:port).
func (s *Server) Addr() string { return s.addr }

// Client returns a new client of the server (the caller closes it).
func (s *Server) Client(opts ...client.Option) (*client.Client, error) {
	all := append(append([]client.Option{client.WithInsecure()}, s.clientOpts...), opts...)
	return client.New(s.Addr(), all...)
}

// NewClient returns a new client of the server, closed in t.Cleanup.
func (s *Server) NewClient(t testing.TB, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := s.Client(opts...)
	if err != nil {
		t.Fatalf("sinktest: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Close stops the server, draining calls in flight (idempotent).
func (s *Server) Close() error {
	if s.p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.p.Stop(ctx)
	s.p = nil
	return err
}
