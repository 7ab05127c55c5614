package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sink-io/sink/adapters/sinkgrpc"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	"github.com/sink-io/sink/ports"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

const (
	serving    = healthpb.HealthCheckResponse_SERVING
	notServing = healthpb.HealthCheckResponse_NOT_SERVING
)

// opsStartWithStorage starts Sink with its storage wrapped in an opsStorage.
func opsStartWithStorage(t *testing.T, env map[string]string) (*sinktest.Server, *opsStorage) {
	t.Helper()
	st := &opsStorage{}
	merged := map[string]string{"SINK_HEALTH_INTERVAL": "20ms", "SINK_HEALTH_TIMEOUT": "500ms"}
	for k, v := range env {
		merged[k] = v
	}
	s := sinktest.Start(t, merged, fx.Decorate(func(inner ports.Storage) ports.Storage {
		st.Storage = inner
		return st
	}))
	if s.HTTPAddr == "" {
		t.Fatal("the HTTP operations endpoint is not listening")
	}
	return s, st
}

// opsHealthState returns the gRPC health of the server and of the Sink
// service, and the /readyz and /livez status codes, as one comparable string.
func opsHealthState(s *sinktest.Server) string {
	var parts []string
	for _, svc := range []string{"", sinkgrpc.ServiceName} {
		st, err := opsHealth(s.Conn, svc)
		if err != nil {
			parts = append(parts, fmt.Sprintf("grpc(%q)=error %v", svc, err))
		} else {
			parts = append(parts, fmt.Sprintf("grpc(%q)=%v", svc, st))
		}
	}
	for _, p := range []string{"/readyz", "/livez"} {
		code, _, err := opsGet("http://" + s.HTTPAddr + p)
		if err != nil {
			parts = append(parts, p+"=error "+err.Error())
		} else {
			parts = append(parts, fmt.Sprintf("%s=%d", p, code))
		}
	}
	return strings.Join(parts, " ")
}

func opsWantState(status healthpb.HealthCheckResponse_ServingStatus, ready int) string {
	return fmt.Sprintf(`grpc("")=%v grpc(%q)=%v /readyz=%d /livez=200`, status, sinkgrpc.ServiceName, status, ready)
}

// awaitHealth polls until the health state is want, and checks that
// liveness stayed up on every poll.
func awaitHealth(t *testing.T, s *sinktest.Server, timeout time.Duration, want string) {
	t.Helper()
	eventually(t, timeout, want, func() (bool, string) {
		got := opsHealthState(s)
		if !strings.Contains(got, "/livez=200") {
			t.Fatalf("liveness failed: %s", got)
		}
		return got == want, got
	})
}

func TestOpsHealthFollowsStorage(t *testing.T) {
	s, st := opsStartWithStorage(t, nil)
	// Ready as soon as Start returns: the first check runs during start-up.
	if got, want := opsHealthState(s), opsWantState(serving, http.StatusOK); got != want {
		t.Fatalf("after start: %s, want %s", got, want)
	}
	code, body, _ := opsGet("http://" + s.HTTPAddr + "/readyz")
	if code != http.StatusOK || body != "ready\nstorage: ok\n" {
		t.Fatalf("/readyz: %d %q", code, body)
	}

	st.down.Store(true)
	awaitHealth(t, s, 10*time.Second, opsWantState(notServing, http.StatusServiceUnavailable))
	code, body, _ = opsGet("http://" + s.HTTPAddr + "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready: storage: storage is down (test switch)") {
		t.Fatalf("/readyz while storage is down: %d %q", code, body)
	}
	m := opsScrape(t, s.HTTPAddr)
	if m.value("sink_ready", nil) != 0 || m.value("sink_dependency_up", map[string]string{"dependency": "storage"}) != 0 {
		t.Fatalf("metrics while down: ready %v, storage up %v", m.value("sink_ready", nil), m.value("sink_dependency_up", nil))
	}

	st.down.Store(false)
	awaitHealth(t, s, 10*time.Second, opsWantState(serving, http.StatusOK))
	m = opsScrape(t, s.HTTPAddr)
	if m.value("sink_ready", nil) != 1 || m.value("sink_dependency_up", map[string]string{"dependency": "storage"}) != 1 {
		t.Fatal("metrics do not follow readiness")
	}
}

// Stopping turns the process not ready before in-flight RPCs drain, keeps
// liveness up meanwhile, and lets the held RPC finish successfully.
func TestOpsShutdownTurnsNotReadyBeforeDraining(t *testing.T) {
	s, st := opsStartWithStorage(t, nil)
	entered, release := st.holdWrites()
	defer release()

	type result struct {
		resp *sinkv1.WriteResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := s.Client.Write(ctx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{
			putOp(addr("shop", "orders", "in-flight"), `{"n":1}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil)}})
		done <- result{resp, err}
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the write never reached storage")
	}

	app := s.App
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- app.Stop(ctx)
	}()
	eventually(t, 10*time.Second, "/readyz 503 while the RPC drains", func() (bool, string) {
		code, body, err := opsGet("http://" + s.HTTPAddr + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "shutting down"), fmt.Sprint(code, body, err)
	})
	if code, _, err := opsGet("http://" + s.HTTPAddr + "/livez"); code != http.StatusOK {
		t.Fatalf("/livez during the drain: %d %v", code, err)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while an RPC was in flight", err)
	default:
	}

	release()
	r := <-done
	if r.err != nil {
		t.Fatalf("the in-flight write failed: %v", r.err)
	}
	expectApplied(t, "in-flight write", r.resp.Results[0])
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	s.App = nil // stopped
	if _, _, err := opsGet("http://" + s.HTTPAddr + "/livez"); err == nil {
		t.Fatal("the HTTP endpoint still answers after stop")
	}
}

func TestOpsHTTPEndpointCanBeDisabled(t *testing.T) {
	s := sinktest.Start(t, map[string]string{"SINK_HTTP_ADDRESS": "off"})
	if s.HTTPAddr != "" {
		t.Fatalf("HTTP endpoint listening on %s although disabled", s.HTTPAddr)
	}
	if st, err := opsHealth(s.Conn, ""); err != nil || st != serving {
		t.Fatalf("gRPC health without the HTTP endpoint: %v %v", st, err)
	}
}

// The Go runtime's profiles are served on the operations endpoint only
// with SINK_PROFILING=true.
func TestOpsProfilesOnlyWhenEnabled(t *testing.T) {
	off := sinktest.Start(t, nil)
	if code, _, err := opsGet("http://" + off.HTTPAddr + "/debug/pprof/"); err != nil || code != http.StatusNotFound {
		t.Fatalf("profiles by default: %d %v, want 404", code, err)
	}
	on := sinktest.Start(t, map[string]string{"SINK_PROFILING": "true"})
	code, body, err := opsGet("http://" + on.HTTPAddr + "/debug/pprof/heap?debug=1")
	if err != nil || code != http.StatusOK || !strings.Contains(body, "heap profile") {
		t.Fatalf("heap profile with SINK_PROFILING=true: %d %v %.100q", code, err, body)
	}
}
