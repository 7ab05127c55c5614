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
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/twmb/franz-go/pkg/kfake"

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
	queue      bool
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

// WithQueue enables RETURN_AFTER_ACCEPTED: Sink runs as server and worker
// in one process (SINK_MODE=all), its mutation log on Watermill's
// in-memory GoChannel, a publish returning once the worker applied the
// mutation (so a read right after an accepted write sees it), and its
// Kafka client on an in-process kfake cluster that carries no mutations.
func WithQueue() Option { return func(o *options) { o.queue = true } }

// WithLogs sends the server's log to w (by default it is discarded).
func WithLogs(w io.Writer) Option { return func(o *options) { o.logs = w } }

// Server is a running in-process Sink.
type Server struct {
	p          *bootstrap.InProcess
	closers    []func()
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
	in := bootstrap.InProcessOptions{Storage: o.storage, Profiles: o.profiles, LogWriter: o.logs}
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if o.queue {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, queueTopic, queueTopic+".dead-letter"), kfake.AllowAutoTopicCreation())
		if err != nil {
			return nil, fmt.Errorf("sinktest: in-process Kafka: %w", err)
		}
		log := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
		dead := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
		closers = append(closers, cluster.Close, func() { _ = log.Close() }, func() { _ = dead.Close() })
		in.Queue = &bootstrap.QueueTransport{Pub: log, Sub: log, DeadLetters: dead}
		for k, v := range map[string]string{
			"SINK_MODE": "all", "SINK_KAFKA_BROKERS": strings.Join(cluster.ListenAddrs(), ","),
			"SINK_KAFKA_TOPIC": queueTopic, "SINK_KAFKA_GROUP_ID": "sinktest-workers",
			"SINK_KAFKA_SESSION_TIMEOUT": "6s", "SINK_KAFKA_PUBLISH_TIMEOUT": "3s",
		} {
			if _, set := o.env[k]; !set {
				o.env[k] = v
			}
		}
	}
	in.Env = maps.Clone(o.env)
	p, err := bootstrap.StartInProcess(ctx, in)
	if err != nil {
		closeAll()
		return nil, err
	}
	if p.GRPCAddr() == "" {
		_ = p.Stop(ctx)
		closeAll()
		return nil, errors.New("sinktest: the configuration serves no gRPC API (SINK_MODE=worker?)")
	}
	return &Server{p: p, closers: closers, addr: p.GRPCAddr(), clientOpts: o.clientOpts}, nil
}

// queueTopic is the mutation log's topic name under WithQueue.
const queueTopic = "sinktest.mutations"

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
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.p, s.closers = nil, nil
	return err
}
