package envconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/internal/testkit/testcerts"
)

func TestSecurityProblemsAreReportedAtOnce(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	a, b := ca.Server(t, "a"), ca.Server(t, "b")
	badAuth := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(badAuth, []byte(`{"principals":[{"name":"x","grants":[]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(map[string]string{
		"SINK_TLS_CERT_FILE":          a.CertFile,
		"SINK_TLS_KEY_FILE":           b.KeyFile, // not a's key
		"SINK_TLS_CLIENT_CA_FILE":     "/nonexistent/ca.pem",
		"SINK_AUTH_TOKEN_FILE":        badAuth,
		"SINK_AUTH_RELOAD_INTERVAL":   "0s",
		"SINK_RATE_LIMIT_OPS":         "-1",
		"SINK_RATE_LIMIT_BYTES_BURST": "5000",
		"SINK_RATE_LIMIT_BYTES":       "0",
		"SINK_KAFKA_TLS_CA_FILE":      ca.CertFile,
		"SINK_KAFKA_SASL_MECHANISM":   "SCRAM-SHA-256",
		"SINK_KAFKA_SASL_USERNAME":    "sink",
	})
	if err == nil {
		t.Fatal("invalid security settings accepted")
	}
	for _, want := range []string{
		"SINK_TLS_CERT_FILE and SINK_TLS_KEY_FILE: cannot load the certificate and key",
		`SINK_TLS_CLIENT_CA_FILE: cannot read "/nonexistent/ca.pem": no such file or directory`,
		"has neither token_hashes nor certificate_identities",
		"SINK_AUTH_RELOAD_INTERVAL must be positive",
		"SINK_RATE_LIMIT_OPS must not be negative",
		"SINK_RATE_LIMIT_BYTES_BURST is set but SINK_RATE_LIMIT_BYTES is not",
		"SINK_KAFKA_TLS_CA_FILE is set but SINK_KAFKA_TLS_ENABLED is not true",
		"SINK_KAFKA_SASL_MECHANISM=SCRAM-SHA-256 needs SINK_KAFKA_SASL_PASSWORD",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing problem %q in:\n%v", want, err)
		}
	}

	_, err = Load(map[string]string{
		"SINK_TLS_KEY_FILE":           a.KeyFile,
		"SINK_TLS_CLIENT_CA_FILE":     ca.CertFile,
		"SINK_RATE_LIMIT_OPS":         "100",
		"SINK_RATE_LIMIT_OPS_BURST":   "10", // below SINK_MAX_OPERATIONS
		"SINK_KAFKA_TLS_ENABLED":      "true",
		"SINK_KAFKA_TLS_CERT_FILE":    a.CertFile,
		"SINK_KAFKA_SASL_MECHANISM":   "GSSAPI",
		"SINK_KAFKA_SASL_PASSWORD":    "hunter2-very-secret",
		"SINK_KAFKA_SASL_USERNAME":    "sink",
		"SINK_KAFKA_BROKERS":          "b:9092",
		"SINK_KAFKA_TOPIC":            "t",
		"SINK_MONGODB_URI":            "mongodb://sink:mongo-password@db:27017/?tls=true",
		"SINK_MONGODB_HIDDEN_FIELD":   "a.b",
		"SINK_KAFKA_MAX_POLL_RECORDS": "x",
	})
	if err == nil {
		t.Fatal("invalid settings accepted")
	}
	for _, want := range []string{
		"SINK_TLS_KEY_FILE is set but SINK_TLS_CERT_FILE is not",
		"SINK_TLS_CLIENT_CA_FILE (mutual TLS) needs TLS",
		"SINK_RATE_LIMIT_OPS_BURST (10) must not be below SINK_MAX_OPERATIONS (1000)",
		"SINK_KAFKA_TLS_CERT_FILE is set but SINK_KAFKA_TLS_KEY_FILE is not",
		`SINK_KAFKA_SASL_MECHANISM must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got "GSSAPI"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing problem %q in:\n%v", want, err)
		}
	}
	for _, secret := range []string{"hunter2-very-secret", "mongo-password"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("the configuration error reveals a secret:\n%v", err)
		}
	}
}

func TestSecretsAreRedacted(t *testing.T) {
	cfg, err := Load(map[string]string{
		"SINK_KAFKA_BROKERS": "b:9092", "SINK_KAFKA_TOPIC": "t",
		"SINK_KAFKA_SASL_MECHANISM": "PLAIN", "SINK_KAFKA_SASL_USERNAME": "sink", "SINK_KAFKA_SASL_PASSWORD": "hunter2-very-secret",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.Security.SASLPassword.Reveal() != "hunter2-very-secret" {
		t.Fatal("the password was not read")
	}
	kafkaSec := cfg.Kafka.Security.Kafka()
	if kafkaSec.Password != "hunter2-very-secret" || kafkaSec.Username != "sink" || kafkaSec.SASLMechanism != "PLAIN" {
		t.Fatalf("the Kafka adapter's configuration lost the credentials: %v", kafkaSec)
	}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("config", "cfg", cfg, "password", cfg.Kafka.Security.SASLPassword)
	j, _ := json.Marshal(cfg)
	for name, s := range map[string]string{
		"%v": fmt.Sprintf("%v", cfg), "%+v": fmt.Sprintf("%+v", cfg), "%#v": fmt.Sprintf("%#v", cfg),
		"slog": logs.String(), "json": string(j), "kafka %+v": fmt.Sprintf("%+v", kafkaSec),
	} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("%s shows the password: %s", name, s)
		}
		if !strings.Contains(s, "[redacted]") {
			t.Errorf("%s does not show [redacted]: %s", name, s)
		}
	}
}

func TestGRPCLimitsAreValidatedAtOnce(t *testing.T) {
	cfg, err := Load(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if g := cfg.GRPC; g.MaxConcurrentStreams != 100 || g.MaxHealthWatchers != 1000 || g.MaxConnectionIdle != 5*time.Minute ||
		g.MaxConnectionAge != 30*time.Minute || g.MaxConnectionAgeGrace != time.Minute || g.KeepaliveMinTime != 10*time.Second || g.HandshakeTimeout != 10*time.Second {
		t.Fatalf("defaults: %+v", g)
	}
	if len(cfg.GRPCLimits().ServerOptions()) != 4 {
		t.Fatal("every limit must become a server option")
	}
	_, err = Load(map[string]string{
		"SINK_GRPC_MAX_CONCURRENT_STREAMS":   "0",
		"SINK_GRPC_MAX_HEALTH_WATCHERS":      "-1",
		"SINK_GRPC_MAX_CONNECTION_IDLE":      "-1s",
		"SINK_GRPC_MAX_CONNECTION_AGE":       "-1m",
		"SINK_GRPC_MAX_CONNECTION_AGE_GRACE": "soon",
		"SINK_GRPC_KEEPALIVE_MIN_TIME":       "0s",
		"SINK_GRPC_HANDSHAKE_TIMEOUT":        "-5s",
	})
	if err == nil {
		t.Fatal("invalid gRPC limits accepted")
	}
	for _, want := range []string{
		"SINK_GRPC_MAX_CONCURRENT_STREAMS must be positive, got 0",
		"SINK_GRPC_MAX_HEALTH_WATCHERS must be positive, got -1",
		"SINK_GRPC_MAX_CONNECTION_IDLE must not be negative (0 = never), got -1s",
		"SINK_GRPC_MAX_CONNECTION_AGE must not be negative (0 = never), got -1m0s",
		`SINK_GRPC_MAX_CONNECTION_AGE_GRACE="soon" is not a valid duration`,
		"SINK_GRPC_KEEPALIVE_MIN_TIME must be positive, got 0s",
		"SINK_GRPC_HANDSHAKE_TIMEOUT must be positive, got -5s",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing problem %q in:\n%v", want, err)
		}
	}
	if strings.Count(err.Error(), "SINK_GRPC_MAX_CONNECTION_AGE_GRACE") != 1 {
		t.Errorf("an unparsable setting must be reported once:\n%v", err)
	}
	// 0 = never is accepted.
	if _, err := Load(map[string]string{"SINK_GRPC_MAX_CONNECTION_IDLE": "0", "SINK_GRPC_MAX_CONNECTION_AGE": "0"}); err != nil {
		t.Fatalf("0 = never: %v", err)
	}
}
