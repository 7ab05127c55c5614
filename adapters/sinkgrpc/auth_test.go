package sinkgrpc

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit"
	"github.com/sink-io/sink/ports"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// tokenAuth accepts one token.
type tokenAuth struct{ token string }

func (a tokenAuth) Authenticate(_ context.Context, c ports.Credentials) (*domain.Principal, error) {
	switch {
	case c.BearerToken == a.token:
		return &domain.Principal{Name: "p"}, nil
	case c.BearerToken != "":
		return nil, domain.Errorf(domain.CodeUnauthenticated, "the bearer token is not valid")
	default:
		return nil, domain.Errorf(domain.CodeUnauthenticated, "the request carries no credentials")
	}
}

// stubAPI records the Writes that reached it and holds them until release
// is closed.
type stubAPI struct {
	sinkv1.UnimplementedSinkServer
	entered chan struct{}
	release chan struct{}
}

func (s *stubAPI) Write(ctx context.Context, _ *sinkv1.WriteRequest) (*sinkv1.WriteResponse, error) {
	s.entered <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return &sinkv1.WriteResponse{}, nil
}

type testServer struct {
	srv     *grpc.Server
	addr    string
	conns   *Connections
	streams *StreamCloser
	api     *stubAPI
	served  chan struct{}
}

// startServer serves the stub API like bootstrap does: authentication
// (when a is not nil), the stream closer and the connection tracker.
func startServer(t *testing.T, a ports.Authenticator, log *slog.Logger, maxWatchers int, extra ...grpc.ServerOption) *testServer {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ts := &testServer{conns: NewConnections(log), streams: NewStreamCloser(maxWatchers), served: make(chan struct{}),
		api: &stubAPI{entered: make(chan struct{}, 16), release: make(chan struct{})}}
	var opts []grpc.ServerOption
	if a != nil {
		opts = append(opts, NewAuthentication(a, log).ServerOptions()...)
	}
	opts = append(opts, grpc.ChainStreamInterceptor(ts.streams.Interceptor()))
	ts.srv = NewGRPCServer(ts.conns.Track(ts.api), health.NewServer(), RequestLimit{Bytes: 64 << 20}, append(opts, extra...)...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = lis.Addr().String()
	go func() {
		defer close(ts.served)
		_ = ts.srv.Serve(ts.conns.Listener(lis))
	}()
	t.Cleanup(func() {
		ts.srv.Stop()
		<-ts.served
	})
	return ts
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// openWrite starts a Write whose request body is never sent: only the
// headers reach the server. It returns the first message or error.
func openWrite(t *testing.T, conn *grpc.ClientConn, ctx context.Context) error {
	t.Helper()
	desc := &grpc.StreamDesc{StreamName: "Write", ClientStreams: true, ServerStreams: true}
	s, err := conn.NewStream(ctx, desc, "/"+ServiceName+"/Write")
	if err != nil {
		return err
	}
	return s.RecvMsg(&sinkv1.WriteResponse{})
}

// The tap handle refuses unauthenticated calls from their headers: the
// client gets UNAUTHENTICATED while it has not sent any of its request
// body. Without it, the server waits for the whole request before the
// interceptor checks the token (here: until the deadline).
func TestUnauthenticatedCallsAreRefusedBeforeTheBody(t *testing.T) {
	var logs testkit.LockedBuffer
	ts := startServer(t, tokenAuth{token: "tok-good-0123456789"}, slog.New(slog.NewJSONHandler(&logs, nil)), 10)
	conn := dial(t, ts.addr)
	for name, md := range map[string]metadata.MD{
		"no credentials": nil,
		"wrong token":    metadata.Pairs("authorization", "Bearer tok-wrong-0123456789"),
		"not a bearer":   metadata.Pairs("authorization", "Basic abc"),
	} {
		ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
		err := openWrite(t, conn, ctx)
		cancel()
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s: %v, want UNAUTHENTICATED before the body", name, err)
		}
	}
	if strings.Contains(logs.String(), "tok-wrong") || !strings.Contains(logs.String(), "refused a call") {
		t.Fatalf("logs:\n%s", logs.String())
	}
	// A valid token passes the tap: the server now waits for the body.
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer tok-good-0123456789"), 300*time.Millisecond)
	defer cancel()
	if err := openWrite(t, conn, ctx); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("authenticated call without a body: %v, want it to wait for the body", err)
	}
	// Health checks need no credentials.
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health check without credentials: %v", err)
	}
}

func TestRefusalsAreLoggedAtABoundedRate(t *testing.T) {
	var logs testkit.LockedBuffer
	r := newRefusalLog(slog.New(slog.NewTextHandler(&logs, nil)), 3, time.Minute)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	for range 1000 {
		r.refused("/sink.v1.Sink/Write", "1.2.3.4:5", "the bearer token is not valid")
	}
	if n := strings.Count(logs.String(), "refused a call"); n != 3 {
		t.Fatalf("%d lines for 1000 refusals in one window, want 3:\n%s", n, logs.String())
	}
	now = now.Add(time.Minute)
	r.refused("/m", "p", "invalid \xff"+strings.Repeat("x", 1000))
	last := logs.String()[strings.LastIndex(strings.TrimSpace(logs.String()), "\n")+1:]
	if !strings.Contains(last, "not_logged_before=997") || len(last) > 600 || strings.Contains(last, "\xff") {
		t.Fatalf("the next window's line: %s", last)
	}
}

func TestCertificateNamesAreTypedInPrecedenceOrder(t *testing.T) {
	u, _ := url.Parse("spiffe://example.org/svc")
	cert := &x509.Certificate{
		Subject:        pkix.Name{CommonName: "innocent.internal"},
		DNSNames:       []string{"billing.internal", "b2.internal"},
		EmailAddresses: []string{"ops@example.org"},
		URIs:           []*url.URL{u},
	}
	want := []string{"uri:spiffe://example.org/svc", "dns:billing.internal", "dns:b2.internal", "email:ops@example.org", "cn:innocent.internal"}
	if got := CertificateNames(cert); !slices.Equal(got, want) {
		t.Fatalf("CertificateNames = %q, want %q", got, want)
	}
}
