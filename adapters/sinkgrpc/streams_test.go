package sinkgrpc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// waitFor polls cond (an observable server state without an event to
// await), bounded in time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Connections that never finish their handshake, an idle connection and an
// open health watch do not hold the shutdown: it returns at once, cleanly.
// (grpc-go's GracefulStop and Stop alone wait for every handshake until
// the connection timeout, 120s by default.)
func TestShutdownClosesHalfOpenConnectionsAndIdleStreams(t *testing.T) {
	ts := startServer(t, nil, nil, 10)
	var raw []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		raw = append(raw, c)
	}
	conn := dial(t, ts.addr)
	watch, err := healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three connections in their handshake", func() bool { return ts.conns.Handshaking() == 3 })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	ts.streams.CloseAll()
	if err := ts.conns.Shutdown(ctx, ts.srv); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Shutdown took %v", took)
	}
	for i, c := range raw {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		// The server may have sent its HTTP/2 settings; then it closes.
		if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("half-open connection %d: %v, want it closed", i, err)
		}
	}
	if _, err := watch.Recv(); err == nil {
		t.Fatal("the health watch survived the shutdown")
	}
}

// A Sink RPC still running at the shutdown timeout is cut, and Shutdown
// says so; nothing else makes it fail.
func TestShutdownReportsCutOffRPCs(t *testing.T) {
	ts := startServer(t, nil, nil, 10)
	conn := dial(t, ts.addr)
	done := make(chan error, 1)
	go func() {
		_, err := sinkv1.NewSinkClient(conn).Write(context.Background(), &sinkv1.WriteRequest{})
		done <- err
	}()
	<-ts.api.entered
	if n := ts.conns.InFlight(); n != 1 {
		t.Fatalf("in flight: %d, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := ts.conns.Shutdown(ctx, ts.srv)
	if err == nil || !strings.Contains(err.Error(), "cannot drain 1 in-flight RPCs") {
		t.Fatalf("Shutdown with an RPC in flight: %v", err)
	}
	if err := <-done; status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
		t.Fatalf("the cut RPC: %v", err)
	}
}

// A finished RPC is no longer in flight; the drain waits for running ones.
func TestShutdownDrainsInFlightRPCs(t *testing.T) {
	ts := startServer(t, nil, slog.New(slog.DiscardHandler), 10)
	conn := dial(t, ts.addr)
	done := make(chan error, 1)
	go func() {
		_, err := sinkv1.NewSinkClient(conn).Write(context.Background(), &sinkv1.WriteRequest{})
		done <- err
	}()
	<-ts.api.entered
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- ts.conns.Shutdown(ctx, ts.srv)
	}()
	// New connections are refused once the drain began.
	waitFor(t, "the listener closed", func() bool {
		c, err := net.DialTimeout("tcp", ts.addr, time.Second)
		if err != nil {
			return true
		}
		_ = c.Close()
		return false
	})
	close(ts.api.release)
	if err := <-done; err != nil {
		t.Fatalf("the drained RPC: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := ts.conns.InFlight(); n != 0 {
		t.Fatalf("in flight after the drain: %d", n)
	}
}

func TestHealthWatchersAreBounded(t *testing.T) {
	ts := startServer(t, nil, nil, 2)
	client := healthpb.NewHealthClient(dial(t, ts.addr))
	open := func() (healthpb.Health_WatchClient, context.CancelFunc, error) {
		ctx, cancel := context.WithCancel(context.Background())
		w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		return w, cancel, err
	}
	_, cancel1, err := open()
	if err != nil {
		t.Fatal(err)
	}
	_, cancel2, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer cancel2()
	_, cancel3, err := open()
	defer cancel3()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "at most 2") {
		t.Fatalf("third watcher: %v, want RESOURCE_EXHAUSTED", err)
	}
	cancel1()
	waitFor(t, "the first watcher gone", func() bool { return ts.streams.HealthWatchers() == 1 })
	_, cancel4, err := open()
	defer cancel4()
	if err != nil {
		t.Fatalf("a watcher after one left: %v", err)
	}
}

// Every RPC of the Sink service is counted in flight while its handler
// runs: the tracked API has a method for each (a new RPC without one
// would go uncounted through the embedded interface).
func TestTrackCountsEverySinkRPC(t *testing.T) {
	c := NewConnections(slog.New(slog.DiscardHandler))
	api := &blockingAPI{entered: make(chan int64, 1), release: make(chan struct{}), c: c}
	tracked := c.Track(api)
	srv := NewGRPCServer(tracked, health.NewServer(), RequestLimit{Bytes: 1 << 20})
	if got, want := len(srv.GetServiceInfo()[ServiceName].Methods), len(sinkv1.Sink_ServiceDesc.Methods)+len(sinkv1.Sink_ServiceDesc.Streams); got != want {
		t.Fatalf("%d methods served, %d in the service", got, want)
	}
	calls := map[string]func(){
		"Read":   func() { _, _ = tracked.Read(t.Context(), &sinkv1.ReadRequest{}) },
		"Write":  func() { _, _ = tracked.Write(t.Context(), &sinkv1.WriteRequest{}) },
		"Delete": func() { _, _ = tracked.Delete(t.Context(), &sinkv1.DeleteRequest{}) },
		"Count":  func() { _, _ = tracked.Count(t.Context(), &sinkv1.CountRequest{}) },
		"Scan":   func() { _ = tracked.Scan(&sinkv1.ScanRequest{}, nil) },
	}
	names := []string{}
	for _, m := range sinkv1.Sink_ServiceDesc.Methods {
		names = append(names, m.MethodName)
	}
	for _, m := range sinkv1.Sink_ServiceDesc.Streams {
		names = append(names, m.StreamName)
	}
	for _, name := range names {
		m := struct{ MethodName string }{name}
		call, ok := calls[m.MethodName]
		if !ok {
			t.Fatalf("RPC %s: the test does not call it (and Track may not count it)", m.MethodName)
		}
		done := make(chan struct{})
		go func() { call(); close(done) }()
		if n := <-api.entered; n != 1 {
			t.Errorf("%s: %d in flight while it runs, want 1", m.MethodName, n)
		}
		api.release <- struct{}{}
		<-done
		if n := c.InFlight(); n != 0 {
			t.Errorf("%s: %d in flight after it returned", m.MethodName, n)
		}
	}
}

// blockingAPI reports the in-flight count when a call enters, then waits.
type blockingAPI struct {
	sinkv1.UnimplementedSinkServer
	entered chan int64
	release chan struct{}
	c       *Connections
}

func (b *blockingAPI) wait() { b.entered <- int64(b.c.InFlight()); <-b.release }

func (b *blockingAPI) Read(context.Context, *sinkv1.ReadRequest) (*sinkv1.ReadResponse, error) {
	b.wait()
	return &sinkv1.ReadResponse{}, nil
}

func (b *blockingAPI) Write(context.Context, *sinkv1.WriteRequest) (*sinkv1.WriteResponse, error) {
	b.wait()
	return &sinkv1.WriteResponse{}, nil
}

func (b *blockingAPI) Delete(context.Context, *sinkv1.DeleteRequest) (*sinkv1.DeleteResponse, error) {
	b.wait()
	return &sinkv1.DeleteResponse{}, nil
}

func (b *blockingAPI) Count(context.Context, *sinkv1.CountRequest) (*sinkv1.CountResponse, error) {
	b.wait()
	return &sinkv1.CountResponse{}, nil
}

func (b *blockingAPI) Scan(*sinkv1.ScanRequest, sinkv1.Sink_ScanServer) error {
	b.wait()
	return nil
}
