package bootstrap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	cfg, err := LoadConfig(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != ModeServer || cfg.GRPCAddress != ":8080" || cfg.Store != "primary" || cfg.ShutdownTimeout != 30*time.Second ||
		cfg.MaxOperations != 1000 || cfg.MongoDB.HiddenField != "__sink" || cfg.Kafka.MaxPollRecords != 500 {
		t.Fatalf("defaults: %+v", cfg)
	}
	if err := cfg.Application().Validate(); err != nil {
		t.Fatalf("default application config invalid: %v", err)
	}
}

func TestEveryProblemIsReportedAtOnce(t *testing.T) {
	_, err := LoadConfig(map[string]string{
		"SINK_MODE":                 "sideways",
		"SINK_MAX_OPERATIONS":       "many",
		"SINK_MAX_KEY_BYTES":        "-1",
		"SINK_SHUTDOWN_TIMEOUT":     "soon",
		"SINK_LOG_FORMAT":           "xml",
		"SINK_GRPC_ADDRESS":         "nowhere",
		"SINK_KAFKA_BROKERS":        "localhost:9092",
		"SINK_MONGODB_HIDDEN_FIELD": "a.b",
		"SINK_MONGODB_BULK_CHUNK":   "100001",
		"SINK_MERGE_TIMEOUT":        "0s",
	})
	if err == nil {
		t.Fatal("invalid configuration accepted")
	}
	ce, ok := err.(*ConfigError)
	if !ok {
		t.Fatalf("error type %T", err)
	}
	for _, want := range []string{
		`SINK_MODE must be server, worker or all, got "sideways"`,
		`SINK_MAX_OPERATIONS="many" is not a valid integer`,
		"SINK_MAX_KEY_BYTES must be positive, got -1",
		`SINK_SHUTDOWN_TIMEOUT="soon" is not a valid duration`,
		`SINK_LOG_FORMAT must be json or text, got "xml"`,
		`SINK_GRPC_ADDRESS "nowhere" is not a host:port address`,
		"SINK_KAFKA_BROKERS is set but SINK_KAFKA_TOPIC is not",
		"SINK_MONGODB_HIDDEN_FIELD",
		"SINK_MONGODB_BULK_CHUNK must be at most 100000",
		"SINK_MERGE_TIMEOUT must be positive",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing problem %q in:\n%s", want, err)
		}
	}
	for _, p := range ce.Problems {
		if strings.Contains(p, "SINK_MAX_OPERATIONS must be positive") {
			t.Errorf("an unparsable value must be reported once, not also as a range problem: %q", p)
		}
	}
}

func TestWorkerModesNeedKafka(t *testing.T) {
	for _, mode := range []string{ModeWorker, ModeAll} {
		_, err := LoadConfig(map[string]string{"SINK_MODE": mode})
		if err == nil || !strings.Contains(err.Error(), "SINK_KAFKA_BROKERS, SINK_KAFKA_TOPIC and SINK_KAFKA_GROUP_ID") {
			t.Fatalf("%s without Kafka: %v", mode, err)
		}
		_, err = LoadConfig(map[string]string{"SINK_MODE": mode, "SINK_KAFKA_BROKERS": "b:9092", "SINK_KAFKA_TOPIC": "t"})
		if err == nil || !strings.Contains(err.Error(), "SINK_KAFKA_GROUP_ID") {
			t.Fatalf("%s without group: %v", mode, err)
		}
	}
}

// The README's configuration table is generated from Config; this test keeps
// them in step (regenerate with: go run ./cmd/sink config-table).
func TestREADMEConfigTableMatchesConfig(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- config-table:begin -->\n", "<!-- config-table:end -->"
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatal("README has no config-table markers")
	}
	if got, want := s[i+len(begin):j], ConfigTable(); got != want {
		t.Fatalf("README configuration table is out of date; replace it with the output of `go run ./cmd/sink config-table`:\n%s", want)
	}
}
