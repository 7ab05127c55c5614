// Package sinktest starts real, fx-assembled Sink processes inside a test
// and connects the generated gRPC client to them.
package sinktest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/fx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/internal/testkit"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// Server is a running Sink.
type Server struct {
	App    *fx.App
	Addr   string
	Conn   *grpc.ClientConn
	Client sinkv1.SinkClient
	Config bootstrap.Config
	// HTTPAddr is the address of the HTTP operations endpoint (/livez,
	// /readyz, /metrics), "" when SINK_HTTP_ADDRESS=off.
	HTTPAddr string
}

// Start assembles Sink from env (on top of testkit.Env: both listeners on
// free loopback ports) with bootstrap.StartInProcess, the same assembly as
// the public package sinktest, starts it and connects the generated
// client. Everything is stopped in t.Cleanup.
func Start(t testing.TB, env map[string]string, extra ...fx.Option) *Server {
	t.Helper()
	environ := testkit.Env("SINK_SHUTDOWN_TIMEOUT", "10s")
	for k, v := range env {
		environ[k] = v
	}
	opts := bootstrap.InProcessOptions{Env: environ, Extra: extra}
	if testing.Verbose() {
		opts.LogWriter = testWriter{t}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := bootstrap.StartInProcess(ctx, opts)
	if err != nil {
		t.Fatalf("cannot start Sink: %v", err)
	}
	s := &Server{App: p.App, Config: p.Config, HTTPAddr: p.HTTPAddr()}
	t.Cleanup(func() { s.Stop(t) })
	if s.Addr = p.GRPCAddr(); s.Addr != "" {
		conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		s.Conn = conn
		s.Client = sinkv1.NewSinkClient(conn)
	}
	return s
}

// Stop stops the process (idempotent).
func (s *Server) Stop(t testing.TB) {
	if s.App == nil {
		return
	}
	if s.Conn != nil {
		_ = s.Conn.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.App.Stop(ctx); err != nil {
		t.Errorf("cannot stop Sink: %v", err)
	}
	s.App = nil
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
