package bootstrap

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/application"
)

// envDefault returns the envDefault tag of the Config field with env name.
func envDefault(t *testing.T, name string) string {
	t.Helper()
	var found *reflect.StructField
	var walk func(reflect.Type)
	walk = func(rt reflect.Type) {
		for i := 0; i < rt.NumField(); i++ {
			f := rt.Field(i)
			if f.Tag.Get("env") == name {
				found = &f
			} else if f.Type.Kind() == reflect.Struct {
				walk(f.Type)
			}
		}
	}
	walk(reflect.TypeOf(Config{}))
	if found == nil {
		t.Fatalf("no setting %s", name)
	}
	return found.Tag.Get("envDefault")
}

// One source of defaults: the environment's defaults are the application's
// and the Kafka adapter's.
func TestKafkaAndApplyDefaultsAgree(t *testing.T) {
	cfg, err := LoadConfig(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	app := application.DefaultConfig()
	if cfg.Kafka.ApplyMaxAttempts != app.Apply.MaxAttempts || cfg.Kafka.ApplyMaxBackoff != app.Apply.MaxBackoff {
		t.Errorf("SINK_APPLY_MAX_ATTEMPTS/BACKOFF defaults %d/%s, application defaults %d/%s",
			cfg.Kafka.ApplyMaxAttempts, cfg.Kafka.ApplyMaxBackoff, app.Apply.MaxAttempts, app.Apply.MaxBackoff)
	}
	if got := cfg.Application().Apply; got != app.Apply {
		t.Errorf("default Application().Apply = %+v, application.DefaultConfig().Apply = %+v", got, app.Apply)
	}
	if cfg.Kafka.SessionTimeout != kafka.DefaultSessionTimeout || cfg.Kafka.RebalanceTimeout != kafka.DefaultRebalanceTimeout {
		t.Errorf("session/rebalance defaults %s/%s, adapter defaults %s/%s", cfg.Kafka.SessionTimeout, cfg.Kafka.RebalanceTimeout,
			kafka.DefaultSessionTimeout, kafka.DefaultRebalanceTimeout)
	}
	if cfg.Kafka.BatchBudget() != kafka.DefaultBatchTimeout {
		t.Errorf("default batch budget %s, worker default %s", cfg.Kafka.BatchBudget(), kafka.DefaultBatchTimeout)
	}
	if d := envDefault(t, "SINK_KAFKA_REBALANCE_TIMEOUT"); d != "60s" {
		t.Errorf("SINK_KAFKA_REBALANCE_TIMEOUT default %q", d)
	}
	// The worst case of the default retry policy fits in the budget: the
	// sum of the backoff ceilings of MaxAttempts attempts.
	var worst time.Duration
	ceiling := app.Apply.BaseBackoff
	for i := 1; i < app.Apply.MaxAttempts; i++ {
		worst += min(ceiling, app.Apply.MaxBackoff)
		ceiling *= 2
	}
	if worst >= cfg.Kafka.BatchBudget() {
		t.Errorf("the default retry policy sleeps up to %s, more than the batch budget %s", worst, cfg.Kafka.BatchBudget())
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
		{"log epoch too long", map[string]string{"SINK_KAFKA_LOG_EPOCH": strings.Repeat("e", 129)}, "SINK_KAFKA_LOG_EPOCH must be valid UTF-8 of at most 128 bytes"},
		{"log epoch not UTF-8", map[string]string{"SINK_KAFKA_LOG_EPOCH": "\xff"}, "SINK_KAFKA_LOG_EPOCH must be valid UTF-8"},
		{"unparsable rebalance is reported once", map[string]string{"SINK_KAFKA_REBALANCE_TIMEOUT": "soon"}, `SINK_KAFKA_REBALANCE_TIMEOUT="soon" is not a valid duration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfig(tc.env)
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
	cfg, err := LoadConfig(map[string]string{"SINK_MODE": "worker", "SINK_KAFKA_BROKERS": "localhost:1", "SINK_KAFKA_TOPIC": "m",
		"SINK_KAFKA_GROUP_ID": "g", "SINK_KAFKA_REBALANCE_TIMEOUT": "90s", "SINK_KAFKA_LOG_EPOCH": "epoch-2"})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := kafkaClientConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cc.RebalanceTimeout != 90*time.Second || cc.SessionTimeout != 10*time.Second {
		t.Fatalf("client timeouts %s/%s", cc.RebalanceTimeout, cc.SessionTimeout)
	}
	if cfg.Kafka.BatchBudget() != 30*time.Second || cfg.Kafka.LogEpoch != "epoch-2" {
		t.Fatalf("budget %s, epoch %q", cfg.Kafka.BatchBudget(), cfg.Kafka.LogEpoch)
	}
}

// Every timeout problem is reported at once, not only the first.
func TestKafkaTimeoutsReportEveryProblem(t *testing.T) {
	_, err := LoadConfig(map[string]string{"SINK_KAFKA_REBALANCE_TIMEOUT": "2s", "SINK_APPLY_MAX_BACKOFF": "1s", "SINK_KAFKA_LOG_EPOCH": "\xff"})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"SINK_KAFKA_REBALANCE_TIMEOUT must be at least 3s", "must not be below SINK_KAFKA_SESSION_TIMEOUT", "SINK_APPLY_MAX_BACKOFF (1s) must be at most", "SINK_KAFKA_LOG_EPOCH must be valid UTF-8"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}
