package bootstrap

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/internal/testkit"
	"github.com/sink-io/sink/ports"
)

func kafkaEnv(mode string) map[string]string {
	return testkit.Env(
		"SINK_MODE", mode,
		"SINK_KAFKA_BROKERS", "127.0.0.1:1",
		"SINK_KAFKA_TOPIC", "muts",
		"SINK_KAFKA_GROUP_ID", "workers",
	)
}

// Every role assembles; worker and all get one Kafka client and the
// consumer; server with Kafka gets the queue.
func TestRolesAssemble(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, mode := range []string{ModeServer, ModeWorker, ModeAll} {
		t.Run(mode, func(t *testing.T) {
			cfg, err := LoadConfig(kafkaEnv(mode))
			if err != nil {
				t.Fatal(err)
			}
			var q ports.MutationQueue
			var cl *kgo.Client
			opts := []fx.Option{fx.Populate(&q, &cl)}
			var c *kafka.Worker
			if mode != ModeServer {
				opts = append(opts, fx.Populate(&c))
			}
			app, err := New(cfg, quiet, opts...)
			if err != nil {
				t.Fatal(err)
			}
			_ = app
			if q == nil || cl == nil {
				t.Fatal("no queue or no Kafka client")
			}
			if mode != ModeServer && c == nil {
				t.Fatal("no consumer")
			}
			cl.Close()
		})
	}
	cfg, _ := LoadConfig(testkit.Env("SINK_MODE", ModeServer))
	var q ports.MutationQueue
	if _, err := New(cfg, quiet, fx.Populate(&q)); err == nil {
		t.Fatal("a server without Kafka provides a mutation queue")
	}
}

func TestRoleNeedsKafkaForWorkers(t *testing.T) {
	for _, mode := range []string{ModeWorker, ModeAll} {
		if _, err := Role(Config{Mode: mode}); err == nil || !strings.Contains(err.Error(), "SINK_KAFKA_GROUP_ID") {
			t.Errorf("%s without Kafka: %v", mode, err)
		}
	}
}
