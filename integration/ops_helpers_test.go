package integration_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// opsGet fetches an URL; transport errors are returned, not fatal.
func opsGet(url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// opsHealth returns the gRPC serving status of service ("" = the server).
func opsHealth(conn grpc.ClientConnInterface, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, err
	}
	return resp.GetStatus(), nil
}

// opsMetrics is one scrape of /metrics.
type opsMetrics map[string]*dto.MetricFamily

func opsScrape(t testing.TB, httpAddr string) opsMetrics {
	t.Helper()
	code, body, err := opsGet("http://" + httpAddr + "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("cannot parse the exposition: %v", err)
	}
	return families
}

// value returns the sum of the samples of name whose labels include labels
// (counters and gauges: the value; histograms: the sample count).
func (m opsMetrics) value(name string, labels map[string]string) float64 {
	f, ok := m[name]
	if !ok {
		return 0
	}
	sum := 0.0
next:
	for _, mt := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range mt.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case mt.Counter != nil:
			sum += mt.Counter.GetValue()
		case mt.Gauge != nil:
			sum += mt.Gauge.GetValue()
		case mt.Histogram != nil:
			sum += float64(mt.Histogram.GetSampleCount())
		}
	}
	return sum
}

// series lists the label sets of name, for failure messages and for
// checking that no unexpected label values appear.
func (m opsMetrics) series(name string) []string {
	var out []string
	for _, mt := range m[name].GetMetric() {
		var parts []string
		for _, lp := range mt.GetLabel() {
			parts = append(parts, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
		}
		out = append(out, "{"+strings.Join(parts, ",")+"}")
	}
	sort.Strings(out)
	return out
}

// opsStorage wraps the real storage: its Ping can be made to fail, and its
// writes can be held until released (to keep RPCs in flight).
type opsStorage struct {
	ports.Storage
	down atomic.Bool

	mu      sync.Mutex
	hold    chan struct{} // writes wait for it to close when not nil
	entered chan struct{} // receives one value per held write

	conflictOnce sync.Map // key -> struct{}: first conditional write fails with a revision mismatch
}

func (s *opsStorage) Ping(ctx context.Context) error {
	if s.down.Load() {
		return domain.Errorf(domain.CodeUnavailable, "storage is down (test switch)")
	}
	return s.Storage.Ping(ctx)
}

// holdWrites makes the next writes wait until the returned release is called.
func (s *opsStorage) holdWrites() (entered <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold, s.entered = make(chan struct{}), make(chan struct{}, 64)
	hold := s.hold
	var once sync.Once
	return s.entered, func() { once.Do(func() { close(hold) }) }
}

// conflictOn makes the first conditional (merge) write of key meet a
// concurrent change.
func (s *opsStorage) conflictOn(key string) { s.conflictOnce.Store(key, struct{}{}) }

func (s *opsStorage) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	s.mu.Lock()
	hold, entered := s.hold, s.entered
	s.mu.Unlock()
	if hold != nil {
		entered <- struct{}{}
		select {
		case <-hold:
		case <-ctx.Done():
			out := make([]ports.WriteResult, len(ops))
			for i := range out {
				out[i].Err = ctx.Err()
			}
			return out
		}
	}
	out := make([]ports.WriteResult, len(ops))
	var pass []ports.WriteOp
	var idx []int
	for i, op := range ops {
		k := op.Address.Key.StringValue()
		if op.Condition.Kind == ports.ConditionRevision || op.Condition.Kind == ports.ConditionAbsent {
			if _, ok := s.conflictOnce.LoadAndDelete(k); ok {
				out[i].Err = domain.Errorf(domain.CodeRevisionMismatch, "record changed concurrently (test switch)")
				continue
			}
		}
		pass = append(pass, op)
		idx = append(idx, i)
	}
	if len(pass) > 0 {
		for j, r := range s.Storage.Write(ctx, pass) {
			out[idx[j]] = r
		}
	}
	return out
}
