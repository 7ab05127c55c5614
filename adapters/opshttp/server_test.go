package opshttp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sink-io/sink/ports"
)

type ready bool

func (r ready) Ready() (bool, string) { return bool(r), "report\n" }

func TestServerStartsServesAndStops(t *testing.T) {
	s := NewServer(NewHandler(ready(true), nil), ServerConfig{Address: "127.0.0.1:0", Setting: "SINK_HTTP_ADDRESS"})
	if s.Addr() != nil {
		t.Fatal("an address before Start")
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + s.Addr().String() + PathLive)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Fatalf("GET %s: %d %q", PathLive, resp.StatusCode, body)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + s.Addr().String() + PathLive); err == nil {
		t.Fatal("still serving after Stop")
	}
}

func TestServerNamesItsSettingWhenTheAddressIsTaken(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	s := NewServer(http.NotFoundHandler(), ServerConfig{Address: held.Addr().String(), Setting: "SINK_HTTP_ADDRESS"})
	err = s.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot listen on SINK_HTTP_ADDRESS") {
		t.Fatalf("start on a taken address: %v", err)
	}
}

type fakeWorker struct {
	running bool
	health  error
}

func (w fakeWorker) Running() bool              { return w.running }
func (w fakeWorker) Health() error              { return w.health }
func (w fakeWorker) Counters() map[string]int64 { return map[string]int64{"applied": 7} }

func TestHealthz(t *testing.T) {
	up := ports.HealthCheckFunc(func(context.Context) error { return nil })
	down := ports.HealthCheckFunc(func(context.Context) error { return errors.New("db down") })
	for _, c := range []struct {
		name    string
		w       fakeWorker
		storage ports.HealthChecker
		code    int
		field   string
		want    string
	}{
		{"healthy", fakeWorker{running: true}, up, http.StatusOK, "status", "SERVING"},
		{"stopped", fakeWorker{}, up, http.StatusServiceUnavailable, "worker", "stopped"},
		{"unhealthy", fakeWorker{running: true, health: errors.New("commit failed")}, up, http.StatusServiceUnavailable, "worker", "commit failed"},
		{"storage down", fakeWorker{running: true}, down, http.StatusServiceUnavailable, "storage", "db down"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rt := Healthz(c.w, c.storage)
			rec := httptest.NewRecorder()
			NewHandler(ready(true), nil, rt).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathHealthz, nil))
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if rec.Code != c.code || body[c.field] != c.want || body["applied"] != float64(7) {
				t.Fatalf("%d %v", rec.Code, body)
			}
		})
	}
}
