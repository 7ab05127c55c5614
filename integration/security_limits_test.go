package integration_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/sink-io/sink/internal/testkit/sinktest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// openWriteHeaders starts a Write and sends only its headers, never its
// request body, and returns the server's answer.
func openWriteHeaders(conn *grpc.ClientConn, cx context.Context) error {
	s, err := conn.NewStream(cx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/sink.v1.Sink/Write")
	if err != nil {
		return err
	}
	return s.RecvMsg(&sinkv1.WriteResponse{})
}

// Calls without usable credentials are refused from their headers, before
// their request body is read: a client that sent nothing but headers gets
// UNAUTHENTICATED (before the fix the server waited for the whole request,
// up to SINK_MAX_REQUEST_BYTES, before checking the token). Refusals are
// logged at a bounded rate.
func TestUnauthenticatedCallsAreRefusedBeforeTheBody(t *testing.T) {
	logs := &logCapture{}
	s := sinktest.Start(t, map[string]string{"SINK_AUTH_TOKEN_FILE": newAuthFile(t, authPrincipals()...)}, logs.option())
	for name, md := range map[string]metadata.MD{
		"anonymous":   nil,
		"wrong token": metadata.Pairs("authorization", "Bearer "+wrongToken),
	} {
		cx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
		err := openWriteHeaders(s.Conn, cx)
		cancel()
		expectCode(t, name+" headers without a body", err, codes.Unauthenticated)
	}
	// A valid token passes: then the server waits for the body.
	cx, cancel := context.WithTimeout(withToken(t, adminToken), 300*time.Millisecond)
	defer cancel()
	expectCode(t, "an authenticated call without its body", openWriteHeaders(s.Conn, cx), codes.DeadlineExceeded)

	// A flood of refused calls makes a bounded number of log lines.
	req := &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: addr("n", "d", "k")}}}
	for range 200 {
		_, err := s.Client.Read(ctx(t), req)
		expectCode(t, "anonymous read", err, codes.Unauthenticated)
	}
	if n := strings.Count(logs.String(), "refused a call"); n == 0 || n > 25 {
		t.Fatalf("%d log lines for 202 refused calls, want a bounded number", n)
	}
	if strings.Contains(logs.String(), wrongToken) {
		t.Fatal("a token was logged")
	}
}

// Raw HTTP/2 frames, to observe what a gRPC client library hides.
const (
	frameSettings = 0x4
	framePing     = 0x6
	frameGoAway   = 0x7
	flagAck       = 0x1
)

type frame struct {
	typ, flags byte
	stream     uint32
	payload    []byte
}

func writeFrame(c net.Conn, typ, flags byte, payload []byte) error {
	h := make([]byte, 9, 9+len(payload))
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3], h[4] = typ, flags
	_, err := c.Write(append(h, payload...))
	return err
}

func mustWriteFrame(t testing.TB, c net.Conn, typ, flags byte, payload []byte) {
	t.Helper()
	if err := writeFrame(c, typ, flags, payload); err != nil {
		t.Fatal(err)
	}
}

func readFrame(c net.Conn) (frame, error) {
	var h [9]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return frame{}, err
	}
	f := frame{typ: h[3], flags: h[4], stream: binary.BigEndian.Uint32(h[5:]) & 0x7fffffff}
	f.payload = make([]byte, int(h[0])<<16|int(h[1])<<8|int(h[2]))
	_, err := io.ReadFull(c, f.payload)
	return f, err
}

// dialHTTP2 opens a plaintext HTTP/2 connection (preface and settings) and
// returns it with the server's SETTINGS.
func dialHTTP2(t testing.TB, addr string) (net.Conn, map[uint16]uint32) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	mustWriteFrame(t, c, frameSettings, 0, nil)
	for {
		f, err := readFrame(c)
		if err != nil {
			t.Fatalf("reading the server's settings: %v", err)
		}
		if f.typ == frameSettings && f.flags&flagAck == 0 {
			settings := map[uint16]uint32{}
			for p := f.payload; len(p) >= 6; p = p[6:] {
				settings[binary.BigEndian.Uint16(p)] = binary.BigEndian.Uint32(p[2:])
			}
			mustWriteFrame(t, c, frameSettings, flagAck, nil)
			return c, settings
		}
	}
}

// awaitGoAway reads frames until a GOAWAY (returned) or an error; ping
// acknowledgements are counted.
func awaitGoAway(c net.Conn) (goAway *frame, pingAcks int, err error) {
	for {
		f, err := readFrame(c)
		if err != nil {
			return nil, pingAcks, err
		}
		switch {
		case f.typ == frameGoAway:
			return &f, pingAcks, nil
		case f.typ == framePing && f.flags&flagAck != 0:
			pingAcks++
		case f.typ == framePing:
			// The server's drain ping; a failed write shows in the next read.
			_ = writeFrame(c, framePing, flagAck, f.payload)
		}
	}
}

func TestGRPCConnectionLimits(t *testing.T) {
	t.Run("concurrent streams per connection", func(t *testing.T) {
		s := sinktest.Start(t, map[string]string{"SINK_GRPC_MAX_CONCURRENT_STREAMS": "7"})
		_, settings := dialHTTP2(t, s.Addr)
		const maxConcurrentStreams = 0x3
		if got, ok := settings[maxConcurrentStreams]; !ok || got != 7 {
			t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (sent: %v), want 7", got, ok)
		}
	})
	t.Run("keepalive enforcement", func(t *testing.T) {
		s := sinktest.Start(t, map[string]string{"SINK_GRPC_KEEPALIVE_MIN_TIME": "50ms", "SINK_GRPC_MAX_CONNECTION_IDLE": "0"})
		c, _ := dialHTTP2(t, s.Addr)
		// Pings at the permitted pace, without any call, are answered
		// (gRPC's default policy strikes the third and ends the connection).
		for i := range 6 {
			if i > 0 {
				time.Sleep(100 * time.Millisecond) // the pace under test
			}
			mustWriteFrame(t, c, framePing, 0, []byte{0, 0, 0, 0, 0, 0, 0, byte(i)})
			for {
				f, err := readFrame(c)
				if err != nil {
					t.Fatalf("ping %d at the permitted pace: %v", i, err)
				}
				if f.typ == frameGoAway {
					t.Fatalf("ping %d at the permitted pace: GOAWAY %q", i, f.payload[8:])
				}
				if f.typ == framePing && f.flags&flagAck != 0 {
					break
				}
			}
		}
		// A ping flood is cut off.
		for i := range 5 {
			mustWriteFrame(t, c, framePing, 0, []byte{1, 0, 0, 0, 0, 0, 0, byte(i)})
		}
		g, _, err := awaitGoAway(c)
		if err != nil {
			t.Fatalf("ping flood: %v, want GOAWAY", err)
		}
		const enhanceYourCalm = 0xb
		if code := binary.BigEndian.Uint32(g.payload[4:8]); code != enhanceYourCalm || string(g.payload[8:]) != "too_many_pings" {
			t.Fatalf("ping flood: GOAWAY code %#x %q", code, g.payload[8:])
		}
	})
	for _, tc := range []struct{ name, setting string }{
		{"idle connections are closed", "SINK_GRPC_MAX_CONNECTION_IDLE"},
		{"old connections are closed", "SINK_GRPC_MAX_CONNECTION_AGE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"SINK_GRPC_MAX_CONNECTION_IDLE": "0", "SINK_GRPC_MAX_CONNECTION_AGE": "0", "SINK_GRPC_MAX_CONNECTION_AGE_GRACE": "100ms"}
			env[tc.setting] = "200ms"
			s := sinktest.Start(t, env)
			c, _ := dialHTTP2(t, s.Addr)
			if _, _, err := awaitGoAway(c); err != nil {
				t.Fatalf("%s=200ms: %v, want GOAWAY", tc.setting, err)
			}
		})
	}
	t.Run("handshake timeout", func(t *testing.T) {
		s := sinktest.Start(t, map[string]string{"SINK_GRPC_HANDSHAKE_TIMEOUT": "200ms"})
		c, err := net.Dial("tcp", s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		// The server may send its settings first; then it closes.
		if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("a connection that never sends its preface: %v, want it closed", err)
		}
	})
	t.Run("health watchers", func(t *testing.T) {
		s := sinktest.Start(t, map[string]string{"SINK_GRPC_MAX_HEALTH_WATCHERS": "1"})
		hc := healthpb.NewHealthClient(s.Conn)
		w, err := hc.Watch(ctx(t), &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		if err != nil {
			t.Fatal(err)
		}
		w2, err := hc.Watch(ctx(t), &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = w2.Recv()
		}
		expectCode(t, "a second health watcher", err, codes.ResourceExhausted)
		if _, err := hc.Check(ctx(t), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("Check beside the watcher: %v", err)
		}
	})
}

// halfOpen opens n TCP connections that never finish the handshake.
func halfOpen(t testing.TB, addr string, n int) {
	t.Helper()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
}

// Connections that never finish their handshake and an open health watch
// do not hold the shutdown (before the fix, Stop waited for the handshakes
// until the connection timeout and then failed).
func TestShutdownIsNotHeldByHalfOpenConnections(t *testing.T) {
	s := sinktest.Start(t, map[string]string{"SINK_SHUTDOWN_TIMEOUT": "30s"})
	halfOpen(t, s.Addr, 3)
	watch, err := healthpb.NewHealthClient(s.Conn).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	// A new connection only counts once the server accepted it: a call on
	// another connection proves the accept loop has passed the three.
	other, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := healthpb.NewHealthClient(other).Check(ctx(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.App.Stop(c); err != nil {
		t.Fatalf("Stop with half-open connections: %v", err)
	}
	s.App = nil
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Stop took %v", took)
	}
}

// The reproduction: SIGTERM to the sink process with three TCP
// connections that never finish the handshake, an idle client connection
// and an open health watch exits 0, well before SINK_SHUTDOWN_TIMEOUT
// (before the fix: exit 1 "cannot stop Sink cleanly" after the timeout).
func TestSIGTERMWithHalfOpenConnectionsExitsZero(t *testing.T) {
	const shutdownTimeout = 20 * time.Second
	p := startSinkProcess(t, "SINK_SHUTDOWN_TIMEOUT="+shutdownTimeout.String(), "SINK_MONGODB_URI=")
	cmd, exited, logs := p.cmd, p.exited, p.logs
	halfOpen(t, p.grpcAddr, 3)
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	watch, err := healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("sink exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(shutdownTimeout + 10*time.Second):
		t.Fatalf("sink did not exit within %v of SIGTERM", shutdownTimeout+10*time.Second)
	}
	if took := time.Since(start); took > shutdownTimeout/2 {
		t.Fatalf("the shutdown took %v: it waited for the half-open connections", took)
	}
	if strings.Contains(logs.String(), "cannot stop") {
		t.Fatalf("unclean stop:\n%s", logs.String())
	}
	// The watch saw NOT_SERVING, then its end.
	for i := 0; ; i++ {
		r, err := watch.Recv()
		if err != nil {
			break
		}
		if i == 10 || r.Status == healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("the health watch survived the shutdown: %v", r)
		}
	}
}
