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
