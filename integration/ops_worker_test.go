package integration_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"

	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/internal/testkit"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// The worker role has no gRPC listener: its HTTP endpoint serves liveness,
// readiness (storage, Kafka and the consume loop) and metrics, and
// readiness follows the brokers.
func TestOpsWorkerHealthAndMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kafka broker; skipped with -short")
	}
	broker := kafkatest.StartBroker(t)
	cfg, err := bootstrap.LoadConfig(testkit.Env(
		"SINK_MODE", bootstrap.ModeWorker,
		"SINK_KAFKA_BROKERS", broker.Addr(),
		"SINK_KAFKA_TOPIC", "ops.mutations",
		"SINK_KAFKA_GROUP_ID", "ops-workers",
		"SINK_KAFKA_SESSION_TIMEOUT", "6s",
		"SINK_HEALTH_INTERVAL", "50ms",
		"SINK_HEALTH_TIMEOUT", "500ms",
		"SINK_SHUTDOWN_TIMEOUT", "10s",
	))
	if err != nil {
		t.Fatal(err)
	}
	var ep *bootstrap.HTTPEndpoint
	app, err := bootstrap.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), fx.Populate(&ep))
	if err != nil {
		t.Fatal(err)
	}
	startCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	base := "http://" + ep.Addr().String()
	state := func() (int, int, string) {
		live, _, _ := opsGet(base + "/livez")
		ready, body, err := opsGet(base + "/readyz")
		if err != nil {
			body = err.Error()
		}
		return live, ready, body
	}
	eventually(t, 15*time.Second, "the worker to be ready", func() (bool, string) {
		live, ready, body := state()
		return live == http.StatusOK && ready == http.StatusOK, fmt.Sprint(live, ready, body)
	})
	_, _, body := state()
	for _, want := range []string{"kafka: ok", "storage: ok", "worker: ok"} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz %q lacks %q", body, want)
		}
	}
	m := opsScrape(t, ep.Addr().String())
	if m.value("sink_ready", nil) != 1 || m.value("sink_dependency_up", map[string]string{"dependency": "kafka"}) != 1 {
		t.Errorf("metrics: ready %v kafka up %v", m.value("sink_ready", nil), m.value("sink_dependency_up", map[string]string{"dependency": "kafka"}))
	}
	if code, body, err := opsGet(base + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz (worker route on the shared endpoint): %d %q %v", code, body, err)
	}

	if err := broker.Stop(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the worker to be not ready while Kafka is down", func() (bool, string) {
		live, ready, body := state()
		if live != http.StatusOK {
			t.Fatalf("liveness failed while Kafka is down: %d", live)
		}
		return ready == http.StatusServiceUnavailable && strings.Contains(body, "kafka: "), fmt.Sprint(ready, body)
	})
	if err := broker.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the worker to be ready again", func() (bool, string) {
		_, ready, body := state()
		return ready == http.StatusOK, fmt.Sprint(ready, body)
	})
}

// The queue and worker metrics move with a known asynchronous workload:
// published mutations, mutations the worker applied, an undecodable record
// dead-lettered, and the lag of the polled partitions.
func TestOpsWorkerMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kafka broker; skipped with -short")
	}
	const topic = "ops.metrics.mutations"
	brokers := kafkatest.InProcess(t, kafkatest.Topics(topic, topic+".dead-letter"), kafkatest.Partitions(2))
	s := sinktest.Start(t, map[string]string{
		"SINK_MODE":                  bootstrap.ModeAll,
		"SINK_KAFKA_BROKERS":         strings.Join(brokers, ","),
		"SINK_KAFKA_TOPIC":           topic,
		"SINK_KAFKA_GROUP_ID":        "ops-metrics",
		"SINK_KAFKA_SESSION_TIMEOUT": "6s",
	})
	const requests, perRequest = 3, 4
	for r := 0; r < requests; r++ {
		var ops []*sinkv1.WriteOperation
		for i := 0; i < perRequest; i++ {
			ops = append(ops, putOp(addr("shop", "async", fmt.Sprintf("k-%d-%d", r, i)), `{"n":1}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))
		}
		resp, err := s.Client.Write(ctx(t), &sinkv1.WriteRequest{Operations: ops, Completion: sinkv1.CompletionMode_COMPLETION_MODE_RETURN_AFTER_ACCEPTED})
		if err != nil {
			t.Fatal(err)
		}
		for _, res := range resp.Results {
			if res.Status != sinkv1.OperationStatus_OPERATION_STATUS_ACCEPTED {
				t.Fatalf("async put: %v", res)
			}
		}
	}
	// A record that is no Sink mutation.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx(t), &kgo.Record{Topic: topic, Key: []byte("junk"), Value: []byte("not a mutation")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	const total = requests * perRequest
	applied := map[string]string{"namespace": "shop", "dataset": "async", "kind": "put", "status": "applied"}
	eventually(t, 30*time.Second, "the worker to apply the mutations and dead-letter the junk", func() (bool, string) {
		m := opsScrape(t, s.HTTPAddr)
		a, d := m.value("sink_worker_mutations_total", applied), m.value("sink_worker_dead_lettered_total", map[string]string{"reason": "UNDECODABLE"})
		return a == total && d == 1, fmt.Sprintf("applied %v, dead-lettered %v", a, d)
	})
	m := opsScrape(t, s.HTTPAddr)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sink_queue_published_mutations_total", nil, total},
		{"sink_queue_publish_duration_seconds", nil, requests},
		{"sink_operations_total", map[string]string{"kind": "put", "completion": "return_after_accepted", "status": "accepted"}, total},
		{"sink_worker_dead_lettered_total", nil, 1},
		{"sink_dependency_up", map[string]string{"dependency": "kafka"}, 1},
	} {
		if got := m.value(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v; series %v", c.name, c.labels, got, c.want, m.series(c.name))
		}
	}
	lag := m.series("sink_worker_lag_records")
	if len(lag) == 0 || !strings.Contains(strings.Join(lag, " "), `topic="`+topic+`"`) {
		t.Errorf("no lag series for the polled partitions: %v", lag)
	}
	if got := m.value("sink_worker_lag_records", nil); got != 0 {
		t.Errorf("lag after everything was consumed = %v, want 0", got)
	}
}
