package envconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/adapters/mergepatch"
	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/adapters/sinkgrpc"
	"github.com/sink-io/sink/adapters/sinkprom"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/internal/heapfloor"
)

func TestDefaults(t *testing.T) {
	cfg, err := Load(map[string]string{})
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

// One source of defaults: the configs the default environment maps to are
// the adapters' and the application's own defaults, except for the fields
// that come from the environment's own settings.
func TestMappedDefaultsAreTheAdaptersDefaults(t *testing.T) {
	cfg := Defaults()
	if loaded, err := Load(map[string]string{}); err != nil || !reflect.DeepEqual(loaded, cfg) {
		t.Fatalf("Load of an empty environment = %+v, %v; want Defaults() = %+v", loaded, err, cfg)
	}
	same := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("default %s:\n got %+v\nwant %+v", what, got, want)
		}
	}
	app := application.DefaultConfig()
	app.AsyncDisabledHint = cfg.Application().AsyncDisabledHint
	app.MaxRequestBytesSetting = "SINK_MAX_REQUEST_BYTES" // (the environment layer names its own settings)
	app.MinDeadlineSetting = "SINK_MIN_DEADLINE"
	same("application config", cfg.Application(), app)
	same("health config", cfg.Health(), application.DefaultHealthConfig())
	metrics := sinkprom.DefaultOptions()
	metrics.Store = cfg.Store // SINK_STORE, the application's store
	same("metrics options", cfg.Metrics(), metrics)
	mo, err := cfg.MongoDBOptions()
	if err != nil {
		t.Fatal(err)
	}
	same("MongoDB options", mo, mongodb.DefaultOptions())
	same("gRPC limits", cfg.GRPCLimits(), sinkgrpc.DefaultLimits())
	if cfg.MaxNestingDepth != mergepatch.DefaultMaxDepth {
		t.Errorf("default SINK_MAX_NESTING_DEPTH %d, merge-patch's %d", cfg.MaxNestingDepth, mergepatch.DefaultMaxDepth)
	}

	cc := cfg.KafkaClient()
	wantClient := kafka.DefaultClientConfig()
	// From SINK_KAFKA_BROKERS, SINK_MODE, SINK_MAX_DOCUMENT_BYTES and the security settings.
	wantClient.Brokers, wantClient.ClientID, wantClient.MaxRecordBytes, wantClient.Security = cc.Brokers, cc.ClientID, cc.MaxRecordBytes, cc.Security
	same("Kafka client config", cc, wantClient)
	q := cfg.Queue()
	wantQueue := kafka.DefaultQueueConfig()
	wantQueue.Topic = q.Topic
	same("queue config", q, wantQueue)
	sub := cfg.Subscriber()
	wantSub := kafka.DefaultSubscriberConfig()
	wantSub.Topic, wantSub.CloseTimeout = sub.Topic, sub.CloseTimeout // SINK_KAFKA_TOPIC, SINK_SHUTDOWN_TIMEOUT
	same("subscriber config", sub, wantSub)
	w := cfg.Worker()
	wantWorker := kafka.DefaultWorkerConfig()
	wantWorker.Topic, wantWorker.DeadLetterTopic, wantWorker.MaxBatch = w.Topic, w.DeadLetterTopic, w.MaxBatch // SINK_KAFKA_TOPIC, SINK_KAFKA_DEAD_LETTER_TOPIC, SINK_KAFKA_MAX_POLL_RECORDS
	same("worker config", w, wantWorker)
}

// The ranges are the adapters' and the application's Validate; their
// problems name the variables, once each.
func TestAdapterProblemsNameTheVariables(t *testing.T) {
	bad := map[string]string{
		"SINK_STORE":          "", // empty means the default: not a problem
		"SINK_MAX_OPERATIONS": "0", "SINK_MAX_DOCUMENT_BYTES": "0", "SINK_MAX_KEY_BYTES": "0", "SINK_MAX_NAME_LENGTH": "0",
		"SINK_MAX_REQUEST_BYTES": "0", "SINK_MERGE_MAX_ATTEMPTS": "0", "SINK_MERGE_TIMEOUT": "0", "SINK_BATCH_MAX_OPS": "0",
		"SINK_BATCH_SHARDS": "0", "SINK_IDEMPOTENCY_RING": "0", "SINK_APPLY_MAX_ATTEMPTS": "0", "SINK_APPLY_MAX_BACKOFF": "-1s",
		"SINK_MONGODB_HIDDEN_FIELD": "_id", "SINK_MONGODB_BULK_CHUNK": "0", "SINK_MONGODB_BULK_CONCURRENCY": "0",
		"SINK_KAFKA_MAX_POLL_RECORDS": "0", "SINK_KAFKA_PUBLISH_TIMEOUT": "0", "SINK_KAFKA_SESSION_TIMEOUT": "0",
		"SINK_KAFKA_REBALANCE_TIMEOUT": "0", "SINK_KAFKA_LOG_EPOCH": "\xff", "SINK_HEALTH_INTERVAL": "0", "SINK_HEALTH_TIMEOUT": "0",
		"SINK_METRICS_MAX_DATASETS": "0", "SINK_GRPC_MAX_CONCURRENT_STREAMS": "0", "SINK_GRPC_MAX_CONNECTION_AGE_GRACE": "-1s",
		"SINK_MAX_INFLIGHT_OPERATIONS": "-1", "SINK_SCAN_PAGE_TIME": "0", "SINK_SCAN_MAX_SCANNED": "0", "SINK_COUNT_TIME": "-1s",
		"SINK_COUNT_MAX_SCANNED": "0",
	}
	_, err := Load(bad)
	ce, ok := err.(*ConfigError)
	if !ok {
		t.Fatalf("error %T %v", err, err)
	}
	leading := map[string]int{}
	seen := map[string]bool{}
	for _, p := range ce.Problems {
		name := leadingVariable(p)
		if name == "" {
			t.Errorf("problem names no variable first: %q", p)
		}
		if seen[p] {
			t.Errorf("problem reported twice: %q", p)
		}
		seen[p] = true
		leading[name]++
	}
	for name, v := range bad {
		if v != "" && leading[name] == 0 {
			t.Errorf("no problem for %s=%q in:\n%v", name, v, err)
		}
	}
	if leading["SINK_STORE"] != 0 || leading["SINK_IDEMPOTENCY_RING"] != 1 {
		t.Errorf("SINK_STORE: %d problems, SINK_IDEMPOTENCY_RING: %d (the application's and the store's ring), want 0 and 1:\n%v",
			leading["SINK_STORE"], leading["SINK_IDEMPOTENCY_RING"], err)
	}
	for _, want := range []string{
		"SINK_MERGE_TIMEOUT must be positive, got 0s",
		"SINK_MAX_REQUEST_BYTES must be positive, got 0",
		"SINK_KAFKA_PUBLISH_TIMEOUT must be positive, got 0s",
		"SINK_KAFKA_REBALANCE_TIMEOUT must be at least 3s, got 0s",
		"SINK_GRPC_MAX_CONNECTION_AGE_GRACE must not be negative (0 = no limit), got -1s",
		"SINK_MAX_INFLIGHT_OPERATIONS must not be negative (0 = no bound), got -1",
		`SINK_MONGODB_HIDDEN_FIELD "_id" must not be`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

func TestReplaceWord(t *testing.T) {
	for _, tc := range []struct{ s, from, to, want string }{
		{"MaxConnectionAgeGrace must be positive", "MaxConnectionAge", "X", "MaxConnectionAgeGrace must be positive"},
		{"RebalanceTimeout (1s) must not be below SessionTimeout (2s)", "SessionTimeout", "S", "RebalanceTimeout (1s) must not be below S (2s)"},
		{"batch: max operations must be at least 1", "max operations", "M", "batch: M must be at least 1"},
	} {
		if got, _ := replaceWord(tc.s, tc.from, tc.to); got != tc.want {
			t.Errorf("replaceWord(%q, %q) = %q, want %q", tc.s, tc.from, got, tc.want)
		}
	}
}

func TestDefaultDurationsInTheTable(t *testing.T) {
	for d, want := range map[time.Duration]string{30 * time.Second: "30s", 5 * time.Minute: "5m", time.Minute: "1m", 90 * time.Minute: "1h30m",
		2 * time.Hour: "2h", 1500 * time.Millisecond: "1.5s"} {
		if got := formatDefault(reflect.ValueOf(d)); got != want {
			t.Errorf("%v renders as %q, want %q", d, got, want)
		}
	}
}

func TestEveryProblemIsReportedAtOnce(t *testing.T) {
	_, err := Load(map[string]string{
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
		"SINK_REQUEST_ID_HEADER":    "sometimes",
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
		`SINK_REQUEST_ID_HEADER must be failures or always, got "sometimes"`,
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

func TestRequestIDHeaderSetting(t *testing.T) {
	for env, want := range map[string]sinkgrpc.RequestIDResponse{"": sinkgrpc.RequestIDOnFailure, "failures": sinkgrpc.RequestIDOnFailure, "always": sinkgrpc.RequestIDAlways} {
		c, err := Load(map[string]string{"SINK_REQUEST_ID_HEADER": env})
		if err != nil {
			t.Fatalf("SINK_REQUEST_ID_HEADER=%q: %v", env, err)
		}
		if got := c.RequestIDResponse(); got != want {
			t.Errorf("SINK_REQUEST_ID_HEADER=%q: %v, want %v", env, got, want)
		}
	}
}

func TestWorkerModesNeedKafka(t *testing.T) {
	for _, mode := range []string{ModeWorker, ModeAll} {
		_, err := Load(map[string]string{"SINK_MODE": mode})
		if err == nil || !strings.Contains(err.Error(), "SINK_KAFKA_BROKERS, SINK_KAFKA_TOPIC and SINK_KAFKA_GROUP_ID") {
			t.Fatalf("%s without Kafka: %v", mode, err)
		}
		_, err = Load(map[string]string{"SINK_MODE": mode, "SINK_KAFKA_BROKERS": "b:9092", "SINK_KAFKA_TOPIC": "t"})
		if err == nil || !strings.Contains(err.Error(), "SINK_KAFKA_GROUP_ID") {
			t.Fatalf("%s without group: %v", mode, err)
		}
	}
}

// The configuration table of docs/configuration.md is generated from
// Config; this test keeps them in step (regenerate with: go run ./cmd/sink
// config-table).
func TestConfigTableDocMatchesConfig(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := ConfigTable()
	if !strings.HasPrefix(want, "| Variable |") {
		t.Fatalf("ConfigTable does not start with the table's header: %.40q", want)
	}
	if !strings.Contains(string(b), "\n"+want) {
		t.Fatalf("docs/configuration.md's table is out of date; replace it with the output of `go run ./cmd/sink config-table`:\n%s", want)
	}
}

// SINK_MAX_INFLIGHT_OPERATIONS: a default bound, 0 for none, and never
// below the largest request.
func TestMaxInFlightOperations(t *testing.T) {
	cfg, err := Load(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.GRPCLimits().MaxInFlightOperations; got != sinkgrpc.DefaultMaxInFlightOperations {
		t.Errorf("default bound %d, want %d", got, sinkgrpc.DefaultMaxInFlightOperations)
	}
	for v, want := range map[string]int{"0": sinkgrpc.Unbounded, "1000": 1000, "50000": 50000} {
		cfg, err := Load(map[string]string{"SINK_MAX_INFLIGHT_OPERATIONS": v})
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if got := cfg.GRPCLimits().MaxInFlightOperations; got != want {
			t.Errorf("SINK_MAX_INFLIGHT_OPERATIONS=%s: bound %d, want %d", v, got, want)
		}
	}
	_, err = Load(map[string]string{"SINK_MAX_INFLIGHT_OPERATIONS": "999", "SINK_MAX_OPERATIONS": "1000"})
	if err == nil || !strings.Contains(err.Error(), "SINK_MAX_INFLIGHT_OPERATIONS (999) must not be below SINK_MAX_OPERATIONS (1000)") {
		t.Fatalf("a bound below the largest request: %v", err)
	}
}

// SINK_GC_HEAP_FLOOR_BYTES: heapfloor's default, 0 to leave Go's pacing
// alone, never negative.
func TestGCHeapFloor(t *testing.T) {
	for v, want := range map[string]int{"": heapfloor.Default, "0": 0, "8388608": 8 << 20} {
		env := map[string]string{}
		if v != "" {
			env["SINK_GC_HEAP_FLOOR_BYTES"] = v
		}
		cfg, err := Load(env)
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if cfg.GCHeapFloor != want {
			t.Errorf("SINK_GC_HEAP_FLOOR_BYTES=%q: %d, want %d", v, cfg.GCHeapFloor, want)
		}
	}
	if _, err := Load(map[string]string{"SINK_GC_HEAP_FLOOR_BYTES": "-1"}); err == nil || !strings.Contains(err.Error(), "SINK_GC_HEAP_FLOOR_BYTES must be 0 or more, got -1") {
		t.Errorf("a negative floor: %v", err)
	}
}
