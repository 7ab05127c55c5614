package application_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/ports"
)

type switchable struct{ down atomic.Bool }

func (s *switchable) Check(context.Context) error {
	if s.down.Load() {
		return errors.New("connection refused")
	}
	return nil
}

func newMonitor(t *testing.T, cfg application.HealthConfig, deps ...application.Dependency) (*application.HealthMonitor, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	m, err := application.NewHealthMonitor(deps, cfg, slog.New(slog.NewJSONHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return m, &buf
}

func TestHealthMonitorFollowsDependencies(t *testing.T) {
	storage, kafka := &switchable{}, &switchable{}
	m, log := newMonitor(t, application.HealthConfig{Interval: time.Hour, Timeout: time.Second},
		application.Dependency{Name: "storage", Checker: storage}, application.Dependency{Name: "kafka", Checker: kafka})
	if s := m.Status(); s.Ready || s.Reason != application.ReasonStarting {
		t.Fatalf("before the first check: %+v", s)
	}
	var mu sync.Mutex
	var seen []bool
	m.Subscribe(func(s application.HealthStatus) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, s.Ready)
	})
	m.Start(context.Background())
	defer m.Stop()
	if ok, report := m.Ready(); !ok || report != "ready\nstorage: ok\nkafka: ok\n" {
		t.Fatalf("after start: %v %q", ok, report)
	}
	storage.down.Store(true)
	s := m.Check(context.Background())
	if s.Ready || s.Reason != "storage: connection refused" {
		t.Fatalf("storage down: %+v", s)
	}
	if ok, report := m.Ready(); ok || !strings.Contains(report, "not ready: storage: connection refused") || !strings.Contains(report, "kafka: ok") {
		t.Fatalf("report: %q", report)
	}
	m.Check(context.Background()) // no change: no notification
	storage.down.Store(false)
	if s := m.Check(context.Background()); !s.Ready {
		t.Fatalf("storage back: %+v", s)
	}
	mu.Lock()
	if want := []bool{false, true, false, true}; len(seen) != len(want) || seen[1] != true || seen[2] != false || seen[3] != true {
		t.Errorf("notifications %v, want %v", seen, want)
	}
	mu.Unlock()
	lines := logLines(t, log.Bytes())
	if len(lines) != 3 || lines[1]["level"] != "WARN" || lines[1]["reason"] != "storage: connection refused" {
		t.Errorf("log: %s", log.String())
	}

	m.Drain()
	if s := m.Check(context.Background()); s.Ready || s.Reason != application.ReasonShuttingDown {
		t.Fatalf("draining must stay not ready whatever the dependencies say: %+v", s)
	}
}

// stuck ignores its deadline until released.
type stuck chan struct{}

func (s stuck) Check(context.Context) error {
	<-s
	return nil
}

func TestHealthMonitorBoundsEachCheck(t *testing.T) {
	release := make(stuck)
	defer close(release)
	m, _ := newMonitor(t, application.HealthConfig{Interval: time.Hour, Timeout: 20 * time.Millisecond},
		application.Dependency{Name: "storage", Checker: ports.HealthCheckFunc(func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})},
		application.Dependency{Name: "stuck", Checker: release})
	start := time.Now()
	s := m.Check(context.Background())
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("check took %v despite a 20ms timeout", took)
	}
	if s.Ready || !strings.Contains(s.Reason, "storage: did not answer within 20ms") || !strings.Contains(s.Reason, "stuck: did not answer within 20ms") {
		t.Fatalf("status: %+v", s)
	}
}

func TestHealthMonitorChecksPeriodically(t *testing.T) {
	dep := &switchable{}
	m, _ := newMonitor(t, application.HealthConfig{Interval: 5 * time.Millisecond, Timeout: time.Second},
		application.Dependency{Name: "storage", Checker: dep})
	changed := make(chan application.HealthStatus, 16)
	m.Subscribe(func(s application.HealthStatus) { changed <- s })
	<-changed // the current status
	m.Start(context.Background())
	defer m.Stop()
	if s := <-changed; !s.Ready {
		t.Fatalf("first check: %+v", s)
	}
	dep.down.Store(true)
	select {
	case s := <-changed:
		if s.Ready {
			t.Fatalf("unexpected %+v", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the periodic check did not notice the outage")
	}
}

func TestHealthMonitorRejectsBadSetup(t *testing.T) {
	dep := application.Dependency{Name: "storage", Checker: &switchable{}}
	for name, c := range map[string]struct {
		cfg  application.HealthConfig
		deps []application.Dependency
		want string
	}{
		"interval":  {application.HealthConfig{Timeout: time.Second}, nil, "interval must be positive"},
		"timeout":   {application.HealthConfig{Interval: time.Second}, nil, "timeout must be positive"},
		"duplicate": {application.HealthConfig{Interval: time.Second, Timeout: time.Second}, []application.Dependency{dep, dep}, "registered twice"},
		"nameless":  {application.HealthConfig{Interval: time.Second, Timeout: time.Second}, []application.Dependency{{Checker: &switchable{}}}, "no name"},
	} {
		if _, err := application.NewHealthMonitor(c.deps, c.cfg, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
