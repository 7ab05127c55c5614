package envconfig

import (
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/kafka"
)

// The worst case of the default apply retry policy fits in the default
// batch budget: the sum of the backoff ceilings of MaxAttempts attempts.
func TestDefaultApplyRetriesFitTheBatchBudget(t *testing.T) {
	cfg := Defaults()
	app := cfg.Application().Apply
	var worst time.Duration
	ceiling := app.BaseBackoff
	for i := 1; i < app.MaxAttempts; i++ {
		worst += min(ceiling, app.MaxBackoff)
		ceiling *= 2
	}
	if worst >= cfg.Kafka.BatchBudget() {
		t.Errorf("the default retry policy sleeps up to %s, more than the batch budget %s", worst, cfg.Kafka.BatchBudget())
	}
	if cfg.Kafka.BatchBudget() != kafka.DefaultBatchTimeout {
		t.Errorf("default batch budget %s, worker default %s", cfg.Kafka.BatchBudget(), kafka.DefaultBatchTimeout)
	}
}

func TestKafkaTimeoutsValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // "" = valid
	}{
		{"defaults", nil, ""},
		{"short rebalance with small backoff", map[string]string{"SINK_KAFKA_REBALANCE_TIMEOUT": "6s", "SINK_KAFKA_SESSION_TIMEOUT": "6s", "SINK_APPLY_MAX_BACKOFF": "500ms"}, ""},
		{"rebalance below session", map[string]string{"SINK_KAFKA_REBALANCE_TIMEOUT": "8s", "SINK_APPLY_MAX_BACKOFF": "500ms"}, "must not be below SINK_KAFKA_SESSION_TIMEOUT"},
		{"rebalance too short", map[string]string{"SINK_KAFKA_REBALANCE_TIMEOUT": "1s"}, "SINK_KAFKA_REBALANCE_TIMEOUT must be at least 3s"},
		{"backoff exceeds the budget", map[string]string{"SINK_APPLY_MAX_BACKOFF": "10s"}, "SINK_APPLY_MAX_BACKOFF (10s) must be at most SINK_KAFKA_REBALANCE_TIMEOUT/12 (5s)"},
		{"longer rebalance allows it", map[string]string{"SINK_APPLY_MAX_BACKOFF": "10s", "SINK_KAFKA_REBALANCE_TIMEOUT": "2m"}, ""},
		{"log epoch too long", map[string]string{"SINK_KAFKA_LOG_EPOCH": strings.Repeat("e", 257)}, "SINK_KAFKA_LOG_EPOCH must be valid UTF-8 of at most 256 bytes"},
		{"log epoch not UTF-8", map[string]string{"SINK_KAFKA_LOG_EPOCH": "\xff"}, "SINK_KAFKA_LOG_EPOCH must be valid UTF-8"},
		{"unparsable rebalance is reported once", map[string]string{"SINK_KAFKA_REBALANCE_TIMEOUT": "soon"}, `SINK_KAFKA_REBALANCE_TIMEOUT="soon" is not a valid duration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.env)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want a problem containing %q, got %v", tc.want, err)
			case tc.want != "" && strings.Count(err.Error(), "SINK_KAFKA_REBALANCE_TIMEOUT") > 1 && strings.Contains(tc.want, "not a valid"):
				t.Fatalf("reported more than once: %v", err)
			}
		})
	}
}

func TestWorkerClientGetsTheTimeouts(t *testing.T) {
	cfg, err := Load(map[string]string{"SINK_MODE": "worker", "SINK_KAFKA_BROKERS": "localhost:1", "SINK_KAFKA_TOPIC": "m",
		"SINK_KAFKA_GROUP_ID": "g", "SINK_KAFKA_REBALANCE_TIMEOUT": "90s", "SINK_KAFKA_LOG_EPOCH": "epoch-2"})
	if err != nil {
		t.Fatal(err)
	}
	cc := cfg.KafkaClient()
	if cc.RebalanceTimeout != 90*time.Second || cc.SessionTimeout != 10*time.Second || cc.GroupID != "g" || cc.Topic != "m" {
		t.Fatalf("client group %q on %q, timeouts %s/%s", cc.GroupID, cc.Topic, cc.RebalanceTimeout, cc.SessionTimeout)
	}
	w, sub := cfg.Worker(), cfg.Subscriber()
	if w.BatchTimeout != 30*time.Second || w.DeadLetterTimeout != 15*time.Second || sub.CommitTimeout != 10*time.Second {
		t.Fatalf("batch %s, dead letters %s, commit %s", w.BatchTimeout, w.DeadLetterTimeout, sub.CommitTimeout)
	}
	if sub.LogEpoch != "epoch-2" || w.DeadLetterTopic != "m.dead-letter" {
		t.Fatalf("epoch %q, dead-letter topic %q", sub.LogEpoch, w.DeadLetterTopic)
	}
	// A server is a producer only.
	cfg.Mode = ModeServer
	if cc := cfg.KafkaClient(); cc.GroupID != "" || cc.Topic != "" {
		t.Fatalf("server client joins group %q on %q", cc.GroupID, cc.Topic)
	}
}

// Every timeout problem is reported at once, not only the first.
func TestKafkaTimeoutsReportEveryProblem(t *testing.T) {
	_, err := Load(map[string]string{"SINK_KAFKA_REBALANCE_TIMEOUT": "2s", "SINK_APPLY_MAX_BACKOFF": "1s", "SINK_KAFKA_LOG_EPOCH": "\xff"})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"SINK_KAFKA_REBALANCE_TIMEOUT must be at least 3s", "must not be below SINK_KAFKA_SESSION_TIMEOUT", "SINK_APPLY_MAX_BACKOFF (1s) must be at most", "SINK_KAFKA_LOG_EPOCH must be valid UTF-8"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}

func TestKafkaInstanceID(t *testing.T) {
	worker := map[string]string{"SINK_MODE": "worker", "SINK_KAFKA_BROKERS": "localhost:1", "SINK_KAFKA_TOPIC": "m", "SINK_KAFKA_GROUP_ID": "g"}
	with := func(id string) map[string]string {
		env := map[string]string{"SINK_KAFKA_INSTANCE_ID": id}
		for k, v := range worker {
			env[k] = v
		}
		return env
	}
	cfg, err := Load(with("sink-worker-0"))
	if err != nil {
		t.Fatal(err)
	}
	if id := cfg.KafkaClient().InstanceID; id != "sink-worker-0" {
		t.Fatalf("the worker's client has instance id %q", id)
	}
	for _, bad := range []string{"worker 0", "w\u00e9", strings.Repeat("w", 250)} {
		if _, err := Load(with(bad)); err == nil || !strings.Contains(err.Error(), "SINK_KAFKA_INSTANCE_ID") {
			t.Errorf("instance id %q: want a problem naming SINK_KAFKA_INSTANCE_ID, got %v", bad, err)
		}
	}
}
