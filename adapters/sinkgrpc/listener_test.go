package sinkgrpc

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestListenerServesHealthAndDrains(t *testing.T) {
	hs := health.NewServer()
	SetServing(hs, true)
	l := NewListener(NewServer(nil), hs, ListenerConfig{Address: "127.0.0.1:0", RequestLimit: RequestLimit{Bytes: 1 << 20}, MaxHealthWatchers: 4})
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: ServiceName})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", resp, err)
	}
	// A watcher would hold a graceful stop open; Stop ends it.
	watch, err := healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := l.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("still serving after Stop")
	}
}

func TestListenerNamesItsSettingWhenTheAddressIsTaken(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	l := NewListener(NewServer(nil), health.NewServer(), ListenerConfig{Address: held.Addr().String(), Setting: "SINK_GRPC_ADDRESS"})
	if err := l.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "cannot listen on SINK_GRPC_ADDRESS") {
		t.Fatalf("start on a taken address: %v", err)
	}
}
