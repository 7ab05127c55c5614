package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/caarlos0/env/v11"

	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
)

// Modes (SINK_MODE).
const (
	ModeServer = "server"
	ModeWorker = "worker"
	ModeAll    = "all"
)

// Config is every setting of a Sink process, read from the environment.
// The README's configuration table is generated from these tags (see
// ConfigTable); a test keeps the two in step.
type Config struct {
	Mode            string        `env:"SINK_MODE" envDefault:"server" desc:"Role of the process: server (gRPC API), worker (applies queued mutations), or all (both, sharing one storage and one Kafka client)."`
	GRPCAddress     string        `env:"SINK_GRPC_ADDRESS" envDefault:":8080" desc:"Listen address of the gRPC API (server and all modes)."`
	HTTPAddress     string        `env:"SINK_HTTP_ADDRESS" envDefault:":8081" desc:"Listen address of the HTTP operations endpoint in every mode: /livez (liveness), /readyz (readiness), /metrics (Prometheus) and, in worker and all modes, /healthz. The value off disables it."`
	Store           string        `env:"SINK_STORE" envDefault:"primary" desc:"Name of the store this process serves. Requests naming another store get an error; an empty store in a request means this one."`
	ShutdownTimeout time.Duration `env:"SINK_SHUTDOWN_TIMEOUT" envDefault:"30s" desc:"How long a graceful shutdown may drain in-flight work before it is cut short."`
	LogFormat       string        `env:"SINK_LOG_FORMAT" envDefault:"json" desc:"Log format: json or text."`
	LogLevel        string        `env:"SINK_LOG_LEVEL" envDefault:"info" desc:"Log level: debug, info, warn or error."`

	MaxOperations    int `env:"SINK_MAX_OPERATIONS" envDefault:"1000" desc:"Maximum operations in one request."`
	MaxDocumentBytes int `env:"SINK_MAX_DOCUMENT_BYTES" envDefault:"4194304" desc:"Maximum size of one document or merge intent, in bytes."`
	MaxKeyBytes      int `env:"SINK_MAX_KEY_BYTES" envDefault:"1024" desc:"Maximum size of a string or bytes key, in bytes."`
	MaxNameLength    int `env:"SINK_MAX_NAME_LENGTH" envDefault:"120" desc:"Maximum length of store, namespace and dataset names, in bytes."`
	MaxRequestBytes  int `env:"SINK_MAX_REQUEST_BYTES" envDefault:"33554432" desc:"Maximum total size of the keys and documents of one request, in bytes."`
	MaxNestingDepth  int `env:"SINK_MAX_NESTING_DEPTH" envDefault:"100" desc:"Maximum nesting of objects and arrays below the top level of a merged document, its merge intent and the result (at most 10000; MongoDB itself stops at 100). Deeper input fails with INVALID_ARGUMENT."`

	MergeMaxAttempts       int           `env:"SINK_MERGE_MAX_ATTEMPTS" envDefault:"32" desc:"Attempts of one merge's read-modify-write when concurrent writes keep changing the record."`
	MergeProfilesFile      string        `env:"SINK_MERGE_PROFILES_FILE" envDefault:"" desc:"YAML or JSON file of declarative merge profiles (rules over JSON Pointer paths with CEL expressions; docs/profiles.md), loaded at start-up by every role. Any problem in the file, or a profile name that another profile already has, stops start-up. Empty: none."`
	MergeFingerprintPolicy string        `env:"SINK_MERGE_FINGERPRINT_POLICY" envDefault:"apply" desc:"What a worker does with a queued merge whose declarative profile (SINK_MERGE_PROFILES_FILE) has another definition than when the merge was submitted (its fingerprint differs): apply (with the current definition) or dead-letter. Either way it is counted in sink_merge_fingerprint_mismatches_total."`
	MergeTimeout           time.Duration `env:"SINK_MERGE_TIMEOUT" envDefault:"2s" desc:"Time budget of one run of a merge profile. A merge that takes longer is stopped and fails with RESOURCE_EXHAUSTED, not retryable (the same merge would take as long again; the worker dead-letters it at once). A client deadline or cancel that comes first stops it too, with DEADLINE_EXCEEDED or CANCELLED."`

	BatchSingleOps bool `env:"SINK_BATCH_SINGLE_OPS" envDefault:"true" desc:"Natural batching: while a storage call is in flight, the operations of new requests (single-record requests above all) wait and then go to storage together as one batch, in arrival order, with the same per-operation results and the same order of each record's operations; merges of one record that wait together fold into one read-modify-write. No timer: with nothing in flight an operation goes to storage at once. Requests whose records span several shards (SINK_BATCH_SHARDS) are not batched."`
	BatchMaxOps    int  `env:"SINK_BATCH_MAX_OPS" envDefault:"1000" desc:"Most operations in one natural batch; a request with more goes alone."`
	BatchShards    int  `env:"SINK_BATCH_SHARDS" envDefault:"4" desc:"Natural batching: records are spread over this many shards, each with at most one batch at storage at a time (1 to 1024)."`

	IdempotencyRing int `env:"SINK_IDEMPOTENCY_RING" envDefault:"32" desc:"How many mutation ids (queued mutations' ids and clients' idempotency keys) each record remembers in its applied mark, 1 to 1024: the window within which a redelivered queued mutation or a client's retry with the same idempotency_key is recognised and not applied again. Storage reserves room for a full ring in each document's size limit (about 150 bytes per id)."`

	MongoDB MongoDBConfig
	Kafka   KafkaConfig
	// Health checks and metrics (observability.go).
	Observability ObservabilityConfig

	// Resource limits of the gRPC API (grpcserver.go).
	GRPC GRPCConfig
	// Security settings of the gRPC API (security.go).
	TLS       TLSConfig
	Auth      AuthConfig
	RateLimit RateLimitConfig
}

// MongoDBConfig selects and configures the MongoDB storage adapter.
type MongoDBConfig struct {
	URI             string `env:"SINK_MONGODB_URI" desc:"MongoDB connection string. When empty, Sink serves from memory (nothing is persisted). Pool size, timeouts and TLS come from the URI options."`
	HiddenField     string `env:"SINK_MONGODB_HIDDEN_FIELD" envDefault:"__sink" desc:"Top-level field in which Sink keeps its per-record metadata (revision)."`
	BulkChunk       int    `env:"SINK_MONGODB_BULK_CHUNK" envDefault:"1000" desc:"Most unconditional puts and creates in one MongoDB bulk write, at most 100000 (MongoDB's own limit; FerretDB v1 needs 48 or less); chunks also stay under 32 MiB of documents."`
	BulkConcurrency int    `env:"SINK_MONGODB_BULK_CONCURRENCY" envDefault:"4" desc:"Bulk writes of one storage call that run at once (FerretDB v1 needs 1)."`
	Bindings        string `env:"SINK_MONGODB_BINDINGS" desc:"JSON array mapping logical namespace/dataset pairs to existing database/collection pairs, e.g. [{\"namespace\":\"shop\",\"dataset\":\"orders\",\"database\":\"legacy\",\"collection\":\"Orders\"}]."`
}

// KafkaConfig configures the durable mutation queue.
type KafkaConfig struct {
	Brokers          []string      `env:"SINK_KAFKA_BROKERS" envSeparator:"," desc:"Comma-separated Kafka seed brokers. With SINK_KAFKA_TOPIC it enables RETURN_AFTER_ACCEPTED."`
	Topic            string        `env:"SINK_KAFKA_TOPIC" desc:"Topic of the mutation log."`
	GroupID          string        `env:"SINK_KAFKA_GROUP_ID" desc:"Consumer group of the workers (required in worker and all modes)."`
	DeadLetterTopic  string        `env:"SINK_KAFKA_DEAD_LETTER_TOPIC" desc:"Topic for mutations that failed permanently (default: <topic>.dead-letter)."`
	MaxPollRecords   int           `env:"SINK_KAFKA_MAX_POLL_RECORDS" envDefault:"500" desc:"Maximum mutations a worker fetches and applies as one batch."`
	ApplyMaxAttempts int           `env:"SINK_APPLY_MAX_ATTEMPTS" envDefault:"10" desc:"Attempts of a queued mutation on transient failures before it is dead-lettered, summed over its deliveries: a worker gives one batch a third of SINK_KAFKA_REBALANCE_TIMEOUT, then parks the mutations still failing (each with its record's later mutations; delivered again after a pause while the other records go on)."`
	ApplyMaxBackoff  time.Duration `env:"SINK_APPLY_MAX_BACKOFF" envDefault:"5s" desc:"Upper bound of the jittered exponential backoff between attempts of a queued mutation; at most SINK_KAFKA_REBALANCE_TIMEOUT/12, so that several attempts fit in a batch's time budget."`
	PublishTimeout   time.Duration `env:"SINK_KAFKA_PUBLISH_TIMEOUT" envDefault:"5s" desc:"How long an asynchronous Write or Delete waits for the brokers to acknowledge its mutations before reporting them FAILED with a retryable UNAVAILABLE error."`
	SessionTimeout   time.Duration `env:"SINK_KAFKA_SESSION_TIMEOUT" envDefault:"10s" desc:"Consumer group session timeout of a worker: how soon the partitions of a worker that died are handed to the others (the brokers' group.min.session.timeout.ms applies, usually 6s)."`
	RebalanceTimeout time.Duration `env:"SINK_KAFKA_REBALANCE_TIMEOUT" envDefault:"60s" desc:"Consumer group rebalance timeout of a worker: how long the group waits for a worker to finish its batch in a rebalance before expelling it. At least SINK_KAFKA_SESSION_TIMEOUT. A worker bounds one batch to a third of it (mutations still failing then are parked and read again), its dead-letter writes and its offset commit to a sixth each."`
	LogEpoch         string        `env:"SINK_KAFKA_LOG_EPOCH" desc:"Identity of the mutation log in the records' applied marks (at most 128 bytes). Empty: the topic's id, so a re-created topic gets a new identity and the positions of the old one do not hold back the new one. Set it to pin the identity (brokers without topic ids); change it when the topic is re-created."`
	// Security: TLS and SASL towards the brokers (kafka_security.go).
	Security KafkaSecurityConfig
}

// Enabled reports whether a queue is configured.
func (k KafkaConfig) Enabled() bool { return len(k.Brokers) > 0 || k.Topic != "" }

// BatchBudget is the time a worker gives one batch: a third of the
// rebalance timeout. Its dead-letter writes and its offset commit get
// half of that each, so a batch ends well before the group expels it.
func (k KafkaConfig) BatchBudget() time.Duration { return k.RebalanceTimeout / 3 }

// validateTimeouts checks that the rebalance timeout, the session timeout
// and the apply retry budget fit together.
func (k KafkaConfig) validateTimeouts(unparsed map[string]bool) error {
	if unparsed["SINK_KAFKA_REBALANCE_TIMEOUT"] {
		return nil
	}
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	// Every problem is reported, not only the first.
	if k.RebalanceTimeout < 3*time.Second {
		add("SINK_KAFKA_REBALANCE_TIMEOUT must be at least 3s, got %s", k.RebalanceTimeout)
	}
	if k.SessionTimeout > 0 && k.RebalanceTimeout < k.SessionTimeout && !unparsed["SINK_KAFKA_SESSION_TIMEOUT"] {
		add("SINK_KAFKA_REBALANCE_TIMEOUT (%s) must not be below SINK_KAFKA_SESSION_TIMEOUT (%s)", k.RebalanceTimeout, k.SessionTimeout)
	}
	if k.ApplyMaxBackoff > k.BatchBudget()/4 && !unparsed["SINK_APPLY_MAX_BACKOFF"] {
		add("SINK_APPLY_MAX_BACKOFF (%s) must be at most SINK_KAFKA_REBALANCE_TIMEOUT/12 (%s): a worker gives a batch a third of the rebalance timeout, and several attempts must fit in it", k.ApplyMaxBackoff, k.BatchBudget()/4)
	}
	if len(k.LogEpoch) > 128 || !utf8.ValidString(k.LogEpoch) {
		add("SINK_KAFKA_LOG_EPOCH must be valid UTF-8 of at most 128 bytes, got %d bytes", len(k.LogEpoch))
	}
	return errors.Join(errs...)
}

// DeadLetter returns the dead-letter topic name.
func (k KafkaConfig) DeadLetter() string {
	if k.DeadLetterTopic != "" {
		return k.DeadLetterTopic
	}
	return k.Topic + ".dead-letter"
}

// LoadConfig reads the configuration from environ (os.Environ() when nil)
// and validates it, reporting every problem at once.
func LoadConfig(environ map[string]string) (Config, error) {
	if environ == nil {
		environ = map[string]string{}
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok {
				environ[k] = v
			}
		}
	}
	var cfg Config
	var problems []error
	unparsed := map[string]bool{}
	if err := env.ParseWithOptions(&cfg, env.Options{Environment: environ}); err != nil {
		var agg env.AggregateError
		if !errors.As(err, &agg) {
			agg.Errors = []error{err}
		}
		names := envNames()
		for _, e := range agg.Errors {
			var pe env.ParseError
			if errors.As(e, &pe) {
				name := names[pe.Name]
				unparsed[name] = true
				problems = append(problems, fmt.Errorf("%s=%q is not a valid %s", name, environ[name], typeName(pe.Type)))
				continue
			}
			problems = append(problems, e)
		}
	}
	if err := cfg.validate(unparsed); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return cfg, &ConfigError{Problems: flatten(problems)}
	}
	return cfg, nil
}

// ConfigError lists every configuration problem.
type ConfigError struct{ Problems []string }

func (e *ConfigError) Error() string {
	return "invalid configuration:\n  - " + strings.Join(e.Problems, "\n  - ")
}

func flatten(errs []error) []string {
	var out []string
	for _, err := range errs {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			out = append(out, flatten(j.Unwrap())...)
			continue
		}
		out = append(out, err.Error())
	}
	return out
}

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error { return c.validate(nil) }

// validate skips the checks of settings that could not be parsed at all.
func (c Config) validate(unparsed map[string]bool) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	positive := func(name string, v int) {
		if v <= 0 && !unparsed[name] {
			add("%s must be positive, got %d", name, v)
		}
	}
	switch c.Mode {
	case ModeServer, ModeWorker, ModeAll:
	default:
		add("SINK_MODE must be server, worker or all, got %q", c.Mode)
	}
	if c.Mode != ModeWorker {
		if _, _, err := net.SplitHostPort(c.GRPCAddress); err != nil {
			add("SINK_GRPC_ADDRESS %q is not a host:port address: %v", c.GRPCAddress, err)
		}
	}
	positive("SINK_MAX_OPERATIONS", c.MaxOperations)
	positive("SINK_MONGODB_BULK_CHUNK", c.MongoDB.BulkChunk)
	if c.MongoDB.BulkChunk > 100000 {
		add("SINK_MONGODB_BULK_CHUNK must be at most 100000 (MongoDB's limit on the operations of one write command), got %d", c.MongoDB.BulkChunk)
	}
	positive("SINK_MONGODB_BULK_CONCURRENCY", c.MongoDB.BulkConcurrency)
	positive("SINK_MAX_DOCUMENT_BYTES", c.MaxDocumentBytes)
	positive("SINK_MAX_KEY_BYTES", c.MaxKeyBytes)
	positive("SINK_MAX_NAME_LENGTH", c.MaxNameLength)
	positive("SINK_MAX_REQUEST_BYTES", c.MaxRequestBytes)
	positive("SINK_MAX_NESTING_DEPTH", c.MaxNestingDepth)
	if c.MaxNestingDepth > 10000 {
		add("SINK_MAX_NESTING_DEPTH must be at most 10000, got %d", c.MaxNestingDepth)
	}
	positive("SINK_MERGE_MAX_ATTEMPTS", c.MergeMaxAttempts)
	if c.MergeFingerprintPolicy != "apply" && c.MergeFingerprintPolicy != "dead-letter" {
		add("SINK_MERGE_FINGERPRINT_POLICY must be apply or dead-letter, got %q", c.MergeFingerprintPolicy)
	}
	if c.IdempotencyRing < 1 || c.IdempotencyRing > domain.MaxAppliedRing {
		add("SINK_IDEMPOTENCY_RING must be between 1 and %d, got %d", domain.MaxAppliedRing, c.IdempotencyRing)
	}
	positive("SINK_BATCH_MAX_OPS", c.BatchMaxOps)
	if c.BatchShards < 1 || c.BatchShards > 1024 {
		add("SINK_BATCH_SHARDS must be between 1 and 1024, got %d", c.BatchShards)
	}
	if c.MergeTimeout <= 0 && !unparsed["SINK_MERGE_TIMEOUT"] {
		add("SINK_MERGE_TIMEOUT must be positive, got %s", c.MergeTimeout)
	}
	positive("SINK_KAFKA_MAX_POLL_RECORDS", c.Kafka.MaxPollRecords)
	positive("SINK_APPLY_MAX_ATTEMPTS", c.Kafka.ApplyMaxAttempts)
	if c.MaxDocumentBytes > c.MaxRequestBytes && c.MaxRequestBytes > 0 {
		add("SINK_MAX_DOCUMENT_BYTES (%d) must not exceed SINK_MAX_REQUEST_BYTES (%d)", c.MaxDocumentBytes, c.MaxRequestBytes)
	}
	if c.Store == "" {
		add("SINK_STORE must not be empty")
	}
	if c.ShutdownTimeout <= 0 && !unparsed["SINK_SHUTDOWN_TIMEOUT"] {
		add("SINK_SHUTDOWN_TIMEOUT must be positive, got %s", c.ShutdownTimeout)
	}
	switch c.LogFormat {
	case "json", "text":
	default:
		add("SINK_LOG_FORMAT must be json or text, got %q", c.LogFormat)
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		add("SINK_LOG_LEVEL must be debug, info, warn or error, got %q", c.LogLevel)
	}
	if c.MongoDB.URI != "" && c.MongoDB.HiddenField == "" {
		add("SINK_MONGODB_HIDDEN_FIELD must not be empty")
	}
	if c.MongoDB.HiddenField == "_id" || strings.ContainsAny(c.MongoDB.HiddenField, ".$\x00") {
		add("SINK_MONGODB_HIDDEN_FIELD %q must not be _id and must not contain '.', '$' or NUL", c.MongoDB.HiddenField)
	}
	k := c.Kafka
	switch {
	case len(k.Brokers) > 0 && k.Topic == "":
		add("SINK_KAFKA_BROKERS is set but SINK_KAFKA_TOPIC is not: set both to enable the mutation queue, or neither")
	case len(k.Brokers) == 0 && k.Topic != "":
		add("SINK_KAFKA_TOPIC is set but SINK_KAFKA_BROKERS is not: set both to enable the mutation queue, or neither")
	}
	if c.Mode == ModeWorker || c.Mode == ModeAll {
		if !k.Enabled() {
			add("SINK_MODE=%s needs a mutation queue: set SINK_KAFKA_BROKERS, SINK_KAFKA_TOPIC and SINK_KAFKA_GROUP_ID", c.Mode)
		} else if k.GroupID == "" {
			add("SINK_MODE=%s needs SINK_KAFKA_GROUP_ID (the workers' consumer group)", c.Mode)
		}
	}
	if k.ApplyMaxBackoff <= 0 && !unparsed["SINK_APPLY_MAX_BACKOFF"] {
		add("SINK_APPLY_MAX_BACKOFF must be positive, got %s", k.ApplyMaxBackoff)
	}
	if k.PublishTimeout <= 0 && !unparsed["SINK_KAFKA_PUBLISH_TIMEOUT"] {
		add("SINK_KAFKA_PUBLISH_TIMEOUT must be positive, got %s", k.PublishTimeout)
	}
	if k.SessionTimeout <= 0 && !unparsed["SINK_KAFKA_SESSION_TIMEOUT"] {
		add("SINK_KAFKA_SESSION_TIMEOUT must be positive, got %s", k.SessionTimeout)
	}
	errs = append(errs, k.validateTimeouts(unparsed))
	if k.Enabled() && k.DeadLetter() == k.Topic {
		add("SINK_KAFKA_DEAD_LETTER_TOPIC must differ from SINK_KAFKA_TOPIC")
	}
	errs = append(errs, c.validateSecurity(unparsed))
	errs = append(errs, c.validateObservability(unparsed))
	return errors.Join(errs...)
}

// Application returns the application service configuration.
func (c Config) Application() application.Config {
	a := application.DefaultConfig()
	a.Store = c.Store
	a.Limits = application.Limits{
		MaxOperations:    c.MaxOperations,
		MaxDocumentBytes: c.MaxDocumentBytes,
		MaxKeyBytes:      c.MaxKeyBytes,
		MaxNameLength:    c.MaxNameLength,
		MaxRequestBytes:  c.MaxRequestBytes,
	}
	a.Merge.MaxAttempts = c.MergeMaxAttempts
	a.Merge.Timeout = c.MergeTimeout
	a.Batch = application.BatchPolicy{Enabled: c.BatchSingleOps, MaxOps: c.BatchMaxOps, Shards: c.BatchShards}
	a.Apply.MaxAttempts = c.Kafka.ApplyMaxAttempts
	a.Apply.MaxBackoff = c.Kafka.ApplyMaxBackoff
	if a.Apply.BaseBackoff > a.Apply.MaxBackoff {
		a.Apply.BaseBackoff = a.Apply.MaxBackoff
	}
	a.IdempotencyRing = c.IdempotencyRing
	a.AsyncDisabledHint = "set SINK_KAFKA_BROKERS and SINK_KAFKA_TOPIC"
	return a
}

// envNames maps Config field names to their environment variables.
func envNames() map[string]string {
	out := map[string]string{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if name := f.Tag.Get("env"); name != "" {
				out[f.Name] = name
			} else if f.Type.Kind() == reflect.Struct {
				walk(f.Type)
			}
		}
	}
	walk(reflect.TypeOf(Config{}))
	return out
}

func typeName(t reflect.Type) string {
	switch {
	case t == reflect.TypeOf(time.Duration(0)):
		return "duration (like 30s or 2m)"
	case t.Kind() == reflect.Int:
		return "integer"
	default:
		return t.String()
	}
}

// ConfigTable renders the configuration reference as a Markdown table.
func ConfigTable() string {
	var b strings.Builder
	b.WriteString("| Variable | Default | Description |\n|---|---|---|\n")
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := f.Tag.Get("env")
			if name == "" {
				if f.Type.Kind() == reflect.Struct {
					walk(f.Type)
				}
				continue
			}
			def := f.Tag.Get("envDefault")
			if def != "" {
				def = "`" + def + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name, def, strings.ReplaceAll(f.Tag.Get("desc"), "|", "\\|"))
		}
	}
	walk(reflect.TypeOf(Config{}))
	return b.String()
}
