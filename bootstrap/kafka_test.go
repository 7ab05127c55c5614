package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

func kafkaEnv(mode string) map[string]string {
	return map[string]string{
		"SINK_MODE":           mode,
		"SINK_GRPC_ADDRESS":   "127.0.0.1:0",
		"SINK_HTTP_ADDRESS":   "127.0.0.1:0",
		"SINK_KAFKA_BROKERS":  "127.0.0.1:1",
		"SINK_KAFKA_TOPIC":    "muts",
		"SINK_KAFKA_GROUP_ID": "workers",
	}
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
	cfg, _ := LoadConfig(map[string]string{"SINK_MODE": ModeServer, "SINK_GRPC_ADDRESS": "127.0.0.1:0"})
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

func TestDeadLetterCommandErrors(t *testing.T) {
	cfg, err := LoadConfig(kafkaEnv(ModeServer))
	if err != nil {
		t.Fatal(err)
	}
	var ue usageError
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"list", "extra"},
		{"list", "--nope"},
		{"replay"},
		{"replay", "--all", "--id", "x"},
	} {
		var out bytes.Buffer
		if err := DeadLetter(context.Background(), cfg, args, &out); !errors.As(err, &ue) {
			t.Errorf("%q: got %v, want a usage error", args, err)
		}
	}
	noKafka, _ := LoadConfig(map[string]string{})
	if err := DeadLetter(context.Background(), noKafka, []string{"list"}, io.Discard); err == nil || !strings.Contains(err.Error(), "SINK_KAFKA_BROKERS") {
		t.Errorf("without Kafka: %v", err)
	}
}

func letter(p int32, off int64, id string, decodable bool) kafka.DeadLetter {
	d := kafka.DeadLetter{Partition: p, Offset: off, MutationID: id}
	if decodable {
		d.Mutation = &domain.Mutation{ID: id, Kind: domain.MutationDelete}
	} else {
		d.DecodeError = "bad"
	}
	return d
}

func TestSelectDeadLetters(t *testing.T) {
	letters := []kafka.DeadLetter{
		letter(0, 0, "a", true),
		letter(0, 1, "", false),
		letter(0, 2, "b", true),
		letter(1, 0, "c", true),
		letter(1, 2, "a", true), // a dead-lettered again after a replay
	}
	pos := func(ds []kafka.DeadLetter) string {
		var s []string
		for _, d := range ds {
			s = append(s, d.MutationID+"@"+string(rune('0'+d.Partition))+"/"+string(rune('0'+d.Offset)))
		}
		return strings.Join(s, " ")
	}
	got, err := selectDeadLetters(letters, true, "", "", io.Discard)
	if err != nil || pos(got) != "b@0/2 c@1/0 a@1/2" {
		t.Errorf("--all: %s, %v", pos(got), err)
	}
	got, err = selectDeadLetters(letters, false, "", "a,c", io.Discard)
	if err != nil || pos(got) != "c@1/0 a@1/2" {
		t.Errorf("--id a,c: %s, %v", pos(got), err)
	}
	if _, err := selectDeadLetters(letters, false, "1:2,2", "", io.Discard); err == nil || !strings.Contains(err.Error(), "2 partitions") {
		t.Errorf("--offset 2 (in partitions 0 and 1): %v, want an ambiguity error", err)
	}
	got, err = selectDeadLetters(letters, false, "1:2,0:2", "", io.Discard)
	if err != nil || pos(got) != "b@0/2 a@1/2" {
		t.Errorf("--offset 1:2,0:2: %s, %v", pos(got), err)
	}
	if _, err := selectDeadLetters(letters, false, "0:1", "", io.Discard); err == nil || !strings.Contains(err.Error(), "undecodable") {
		t.Errorf("--offset of an undecodable record: %v", err)
	}
	if _, err := selectDeadLetters(letters, false, "7", "", io.Discard); err == nil {
		t.Error("--offset 7 found something")
	}
	if _, err := selectDeadLetters(letters, false, "", "zzz", io.Discard); err == nil {
		t.Error("--id zzz found something")
	}
}
