package integration_test

import (
	"io"
	"log/slog"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/internal/testkit"
)

// The worker is a Watermill Router and the Kafka consumer a Watermill
// Subscriber (compile-time).
var (
	_ message.Subscriber                    = (*kafka.Subscriber)(nil)
	_ message.Publisher                     = (*kafka.Publisher)(nil)
	_ interface{ Router() *message.Router } = (*kafka.Worker)(nil)
)

// The worker and all roles, as assembled by bootstrap, run the worker as a
// message.Router with Sink's handler, fed by the Kafka message.Subscriber.
func TestWorkerRoleRunsARouterOverTheKafkaSubscriber(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, mode := range []string{bootstrap.ModeWorker, bootstrap.ModeAll} {
		cfg, err := bootstrap.LoadConfig(testkit.Env(
			"SINK_MODE", mode, "SINK_KAFKA_BROKERS", "127.0.0.1:1", "SINK_KAFKA_TOPIC", "muts", "SINK_KAFKA_GROUP_ID", "g",
		))
		if err != nil {
			t.Fatal(err)
		}
		var w *kafka.Worker
		var tr bootstrap.WorkerTransport
		if _, err := bootstrap.New(cfg, quiet, fx.Populate(&w, &tr)); err != nil {
			t.Fatal(err)
		}
		if w == nil || w.Router() == nil {
			t.Fatalf("%s: no worker router", mode)
		}
		if _, ok := tr.Subscriber.(*kafka.Subscriber); !ok {
			t.Fatalf("%s: the worker subscribes with %T, want *kafka.Subscriber", mode, tr.Subscriber)
		}
		found := false
		for name := range w.Router().Handlers() {
			found = found || name == kafka.HandlerName
		}
		if !found {
			t.Fatalf("%s: the router has no %s handler", mode, kafka.HandlerName)
		}
	}
}
