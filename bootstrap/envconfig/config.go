package envconfig

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/sink-io/sink/adapters/kafka"
	"github.com/sink-io/sink/adapters/mergepatch"
	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/adapters/sinkprom"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/internal/heapfloor"
)

// Modes (SINK_MODE).
const (
	ModeServer = "server"
	ModeWorker = "worker"
	ModeAll    = "all"
)

// Config is every setting of a Sink process, read from the environment.
// Load overlays the set variables on Defaults(): the settings of an
// adapter or of the application default to that package's own defaults,
// and only the environment's own settings (mode, addresses, logging,
// shutdown, …) have envDefault tags. The configuration table of docs/configuration.md is
// generated from these tags and Defaults() (see ConfigTable); a test keeps
// the two in step.
type Config struct {
	Mode            string        `env:"SINK_MODE" envDefault:"server" desc:"Role of the process: server (gRPC API), worker (applies queued mutations), or all (both, sharing one storage and one Kafka client)."`
	GRPCAddress     string        `env:"SINK_GRPC_ADDRESS" envDefault:":8080" desc:"Listen address of the gRPC API (server and all modes)."`
	HTTPAddress     string        `env:"SINK_HTTP_ADDRESS" envDefault:":8081" desc:"Listen address of the HTTP operations endpoint in every mode: /livez (liveness), /readyz (readiness), /metrics (Prometheus), in worker and all modes /healthz, and with SINK_PROFILING /debug/pprof/. The value off disables it."`
	Store           string        `env:"SINK_STORE" desc:"Name of the default store: an empty store in a request means this one. A process serves one store per configured database (SINK_MONGODB_STORE, SINK_POSTGRES_STORE, SINK_MEMORY_STORE, each defaulting to this name); requests naming a store it does not serve get an error naming those it serves. Unset, and with one database naming its store, that store is the default."`
	MemoryStore     string        `env:"SINK_MEMORY_STORE" desc:"Name of a store served from memory beside the databases (local use and tests; nothing is persisted). Empty: memory serves the default store only when no database is configured."`
	ShutdownTimeout time.Duration `env:"SINK_SHUTDOWN_TIMEOUT" envDefault:"30s" desc:"How long a graceful shutdown may drain in-flight work before it is cut short."`
	LogFormat       string        `env:"SINK_LOG_FORMAT" envDefault:"json" desc:"Log format: json or text."`
	LogLevel        string        `env:"SINK_LOG_LEVEL" envDefault:"info" desc:"Log level: debug, info, warn or error."`
	GCHeapFloor     int           `env:"SINK_GC_HEAP_FLOOR_BYTES" desc:"Heap size, in bytes, below which the Go garbage collector does not start a collection: while the live heap is small, Sink raises GOGC's percentage after each collection so that the next one starts at about this size (Go's own minimum is 4 MiB), and leaves GOGC's percentage as it is once the live heap is large enough to pass it anyway. Fewer collections of a small heap save processor time for at most this many bytes of memory (docs/operations.md#go-runtime). GOMEMLIMIT still applies; with GOGC=off, or 0 here, Go's own pacing is left alone."`

	MaxOperations    int `env:"SINK_MAX_OPERATIONS" desc:"Maximum operations in one request."`
	MaxDocumentBytes int `env:"SINK_MAX_DOCUMENT_BYTES" desc:"Maximum size of one document or merge intent, in bytes."`
	MaxKeyBytes      int `env:"SINK_MAX_KEY_BYTES" desc:"Maximum size of a string or bytes key, in bytes."`
	MaxNameLength    int `env:"SINK_MAX_NAME_LENGTH" desc:"Maximum length of store, namespace and dataset names, in bytes."`
	MaxRequestBytes  int `env:"SINK_MAX_REQUEST_BYTES" desc:"Maximum total size of the keys and documents of one request, in bytes."`
	MaxNestingDepth  int `env:"SINK_MAX_NESTING_DEPTH" desc:"Maximum nesting of objects and arrays below the top level of every JSON or BSON document Sink accepts (content type application/json, a +json type or application/bson: put documents, merge intents, merge results), at most 10000; MongoDB itself stops at 100. Deeper input fails with INVALID_ARGUMENT."`

	MergeMaxAttempts       int           `env:"SINK_MERGE_MAX_ATTEMPTS" desc:"Attempts of one merge's read-modify-write when concurrent writes keep changing the record."`
	MergeProfilesFile      string        `env:"SINK_MERGE_PROFILES_FILE" envDefault:"" desc:"YAML or JSON file of declarative merge profiles (rules over JSON Pointer paths with CEL expressions; docs/profiles.md), loaded at start-up by every role. Any problem in the file, or a profile name that another profile already has, stops start-up. Empty: none."`
	MergeFingerprintPolicy string        `env:"SINK_MERGE_FINGERPRINT_POLICY" envDefault:"apply" desc:"What a worker does with a queued merge whose declarative profile (SINK_MERGE_PROFILES_FILE) has another definition than when the merge was submitted (its fingerprint differs): apply (with the current definition) or dead-letter. Either way it is counted in sink_merge_fingerprint_mismatches_total."`
	MergeTimeout           time.Duration `env:"SINK_MERGE_TIMEOUT" desc:"Time budget of one run of a merge profile. A merge that takes longer is stopped and fails with RESOURCE_EXHAUSTED, not retryable (the same merge would take as long again; the worker dead-letters it at once). A client deadline or cancel that comes first stops it too, with DEADLINE_EXCEEDED or CANCELLED."`

	BatchSingleOps bool `env:"SINK_BATCH_SINGLE_OPS" desc:"Natural batching: while a storage call is in flight, the operations of new requests (single-record requests above all) wait and then go to storage together as one batch, in arrival order, with the same per-operation results and the same order of each record's operations; merges of one record that wait together fold into one read-modify-write. No timer: with nothing in flight an operation goes to storage at once. Requests whose records span several shards (SINK_BATCH_SHARDS) are not batched."`
	BatchMaxOps    int  `env:"SINK_BATCH_MAX_OPS" desc:"Most operations in one natural batch; a request with more goes alone."`
	BatchShards    int  `env:"SINK_BATCH_SHARDS" desc:"Natural batching: records are spread over this many shards, each with at most one batch at storage at a time (1 to 1024)."`

	ScanPageTime    time.Duration `env:"SINK_SCAN_PAGE_TIME" desc:"Time budget of one Scan page: when it runs out the page ends with the records it has and a cursor to go on from; a page that found nothing in it fails with UNAVAILABLE (retryable)."`
	ScanMaxScanned  int           `env:"SINK_SCAN_MAX_SCANNED" desc:"Most records one Scan page reads from storage, those its filter rejects included; a page that reaches it ends with a cursor (a selective filter then returns pages with few or no records, each making progress)."`
	CountTime       time.Duration `env:"SINK_COUNT_TIME" desc:"Time budget of a Count with a filter (which reads the records); one that runs out fails with RESOURCE_EXHAUSTED (narrow the range). A Count without a filter is the storage's own count."`
	CountMaxScanned int           `env:"SINK_COUNT_MAX_SCANNED" desc:"Most records a Count with a filter may read; a larger dataset or range fails with RESOURCE_EXHAUSTED (narrow the range, or count without a filter)."`
	MinDeadline     time.Duration `env:"SINK_MIN_DEADLINE" desc:"Least time a request's deadline may leave when it arrives: a Read, Write, Delete, Scan or Count whose deadline has passed, or leaves less, is refused at once with DEADLINE_EXCEEDED (reason DEADLINE_EXCEEDED: nothing was done), before any storage or queue work. 0: only requests whose deadline has passed."`

	IdempotencyRing int `env:"SINK_IDEMPOTENCY_RING" desc:"How many mutation ids (queued mutations' ids and clients' idempotency keys) each record remembers in its applied mark, 1 to 1024: the window within which a redelivered queued mutation or a client's retry with the same idempotency_key is recognised and not applied again. Storage reserves room for a full ring in each document's size limit (about 150 bytes per id)."`

	MongoDB MongoDBConfig
	// PostgreSQL storage (postgres.go). Its variables are documented in
	// docs/postgres.md (SectionTable), not in the README's table.
	Postgres PostgresConfig `doc:"docs/postgres.md"`
	Kafka    KafkaConfig
	// Health checks and metrics (observability.go).
	Observability ObservabilityConfig

	// Resource limits of the gRPC API (grpc.go).
	GRPC GRPCConfig
	// Security settings of the gRPC API (security.go).
	TLS       TLSConfig
	Auth      AuthConfig
	RateLimit RateLimitConfig
}

// MongoDBConfig selects and configures the MongoDB storage adapter
// (mongodb.Options; defaults mongodb.DefaultOptions()).
type MongoDBConfig struct {
	URI             string `env:"SINK_MONGODB_URI" desc:"MongoDB connection string. When set, MongoDB serves SINK_MONGODB_STORE. Pool size, timeouts and TLS come from the URI options."`
	Store           string `env:"SINK_MONGODB_STORE" desc:"Name of the store MongoDB serves. Empty: SINK_STORE."`
	HiddenField     string `env:"SINK_MONGODB_HIDDEN_FIELD" desc:"Top-level field in which Sink keeps its per-record metadata (revision)."`
	BulkChunk       int    `env:"SINK_MONGODB_BULK_CHUNK" desc:"Most unconditional puts and creates in one MongoDB bulk write, at most 100000 (MongoDB's own limit; FerretDB v1 needs 48 or less); chunks also stay under 32 MiB of documents."`
	BulkConcurrency int    `env:"SINK_MONGODB_BULK_CONCURRENCY" desc:"Bulk writes of one storage call that run at once (FerretDB v1 needs 1)."`
	Bindings        string `env:"SINK_MONGODB_BINDINGS" desc:"JSON array mapping logical namespace/dataset pairs to existing database/collection pairs, e.g. [{\"namespace\":\"shop\",\"dataset\":\"orders\",\"database\":\"legacy\",\"collection\":\"Orders\"}]."`
}

// KafkaConfig configures the durable mutation queue (the Kafka adapter's
// configs, with their defaults; SINK_APPLY_* are the application's).
type KafkaConfig struct {
	Brokers          []string      `env:"SINK_KAFKA_BROKERS" envSeparator:"," desc:"Comma-separated Kafka seed brokers. With SINK_KAFKA_TOPIC it enables RETURN_AFTER_ACCEPTED."`
	Topic            string        `env:"SINK_KAFKA_TOPIC" desc:"Topic of the mutation log."`
	GroupID          string        `env:"SINK_KAFKA_GROUP_ID" desc:"Consumer group of the workers (required in worker and all modes)."`
	DeadLetterTopic  string        `env:"SINK_KAFKA_DEAD_LETTER_TOPIC" desc:"Topic for mutations that failed permanently (default: <topic>.dead-letter)."`
	MaxPollRecords   int           `env:"SINK_KAFKA_MAX_POLL_RECORDS" desc:"Maximum mutations a worker fetches and applies as one batch."`
	ApplyMaxAttempts int           `env:"SINK_APPLY_MAX_ATTEMPTS" desc:"Attempts of a queued mutation on transient failures before it is dead-lettered, summed over its deliveries: a worker gives one batch a third of SINK_KAFKA_REBALANCE_TIMEOUT, then parks the mutations still failing (each with its record's later mutations; delivered again after a pause while the other records go on)."`
	ApplyMaxBackoff  time.Duration `env:"SINK_APPLY_MAX_BACKOFF" desc:"Upper bound of the jittered exponential backoff between attempts of a queued mutation; at most SINK_KAFKA_REBALANCE_TIMEOUT/12, so that several attempts fit in a batch's time budget."`
	PublishTimeout   time.Duration `env:"SINK_KAFKA_PUBLISH_TIMEOUT" desc:"How long an asynchronous Write or Delete waits for the brokers to acknowledge its mutations before reporting them FAILED with a retryable UNAVAILABLE error."`
	SessionTimeout   time.Duration `env:"SINK_KAFKA_SESSION_TIMEOUT" desc:"Consumer group session timeout of a worker: how soon the partitions of a worker that died are handed to the others (the brokers' group.min.session.timeout.ms applies, usually 6s)."`
	RebalanceTimeout time.Duration `env:"SINK_KAFKA_REBALANCE_TIMEOUT" desc:"Consumer group rebalance timeout of a worker: how long the group waits for a worker to finish its batch in a rebalance before expelling it. At least SINK_KAFKA_SESSION_TIMEOUT. A worker bounds one batch to a third of it (mutations still failing then are parked and read again), its dead-letter writes and its offset commit to a sixth each."`
	InstanceID       string        `env:"SINK_KAFKA_INSTANCE_ID" desc:"Static group membership of a worker (Kafka's group.instance.id; 1 to 249 printable ASCII characters, one per worker and stable across its restarts, such as a StatefulSet pod's name). A worker restarted within SINK_KAFKA_SESSION_TIMEOUT takes its partitions back without a rebalance; one that stops for good keeps them until the session timeout ends. Empty: dynamic membership."`
	LogEpoch         string        `env:"SINK_KAFKA_LOG_EPOCH" desc:"Identity of the mutation log in the records' applied marks (at most 256 bytes). Empty: the topic's id, so a re-created topic gets a new identity and the positions of the old one do not hold back the new one. Set it to pin the identity (brokers without topic ids); change it when the topic is re-created."`
	// Security: TLS and SASL towards the brokers (kafka_security.go).
	Security KafkaSecurityConfig
}

// Enabled reports whether a queue is configured.
func (k KafkaConfig) Enabled() bool { return len(k.Brokers) > 0 || k.Topic != "" }

// BatchBudget is the time a worker gives one batch: a third of the
// rebalance timeout. Its dead-letter writes and its offset commit get
// half of that each, so a batch ends well before the group expels it.
func (k KafkaConfig) BatchBudget() time.Duration { return k.RebalanceTimeout / 3 }

// DeadLetter returns the dead-letter topic name.
func (k KafkaConfig) DeadLetter() string {
	if k.DeadLetterTopic != "" {
		return k.DeadLetterTopic
	}
	return k.Topic + ".dead-letter"
}

// Defaults returns the configuration of an empty environment: the
// environment's own settings from their envDefault tags, every other
// setting from the defaults of the adapter or application config it maps
// to, so the two cannot disagree.
func Defaults() Config {
	var c Config
	if err := env.ParseWithOptions(&c, env.Options{Environment: map[string]string{}}); err != nil {
		panic(fmt.Sprintf("envconfig: an envDefault tag is invalid: %v", err)) // a test loads the defaults
	}
	app := application.DefaultConfig()
	c.Store = app.Store
	c.MaxOperations = app.Limits.MaxOperations
	c.MaxDocumentBytes = app.Limits.MaxDocumentBytes
	c.MaxKeyBytes = app.Limits.MaxKeyBytes
	c.MaxNameLength = app.Limits.MaxNameLength
	c.MaxRequestBytes = app.Limits.MaxRequestBytes
	c.MaxNestingDepth = app.Limits.MaxNestingDepth
	c.MergeMaxAttempts = app.Merge.MaxAttempts
	c.MergeTimeout = app.Merge.Timeout
	c.BatchSingleOps, c.BatchMaxOps, c.BatchShards = app.Batch.Enabled, app.Batch.MaxOps, app.Batch.Shards
	c.IdempotencyRing = app.IdempotencyRing
	c.ScanPageTime, c.ScanMaxScanned = app.Scan.PageTime, app.Scan.MaxScannedPerPage
	c.CountTime, c.CountMaxScanned = app.Scan.CountTime, app.Scan.MaxCountScanned
	c.MinDeadline = app.MinDeadline
	c.GCHeapFloor = heapfloor.Default
	c.Kafka.ApplyMaxAttempts = app.Apply.MaxAttempts
	c.Kafka.ApplyMaxBackoff = app.Apply.MaxBackoff

	c.Postgres = postgresDefaults()

	mo := mongodb.DefaultOptions()
	c.MongoDB.HiddenField, c.MongoDB.BulkChunk, c.MongoDB.BulkConcurrency = mo.HiddenField, mo.BulkChunk, mo.BulkConcurrency

	kc := kafka.DefaultClientConfig()
	c.Kafka.PublishTimeout, c.Kafka.SessionTimeout, c.Kafka.RebalanceTimeout = kc.PublishTimeout, kc.SessionTimeout, kc.RebalanceTimeout
	c.Kafka.MaxPollRecords = kafka.DefaultSubscriberConfig().MaxPollRecords

	h := application.DefaultHealthConfig()
	c.Observability.HealthInterval, c.Observability.HealthTimeout = h.Interval, h.Timeout
	c.Observability.MetricsMaxDatasets = sinkprom.DefaultOptions().MaxDatasets
	c.GRPC = grpcDefaults()
	return c
}

// Load reads the configuration from environ (os.Environ() when nil): the
// variables that are set, and not empty, overlay Defaults(). It validates
// the result, reporting every problem at once.
func Load(environ map[string]string) (Config, error) {
	if environ == nil {
		environ = map[string]string{}
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok {
				environ[k] = v
			}
		}
	}
	cfg := Defaults()
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
	cfg.defaultStore(environ)
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
		if err == nil {
			continue
		}
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
// The ranges of the settings that map to an adapter's or the application's
// config are that config's Validate (see adapterProblems); here are only
// the environment's own checks and those that combine several configs.
func (c Config) validate(unparsed map[string]bool) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	errs = append(errs, c.CheckMode())
	if c.Mode != ModeWorker {
		if _, _, err := net.SplitHostPort(c.GRPCAddress); err != nil {
			add("SINK_GRPC_ADDRESS %q is not a host:port address: %v", c.GRPCAddress, err)
		}
	}
	if (c.MaxNestingDepth <= 0 || c.MaxNestingDepth > mergepatch.MaxMaxDepth) && !unparsed["SINK_MAX_NESTING_DEPTH"] {
		add("SINK_MAX_NESTING_DEPTH must be between 1 and %d, got %d", mergepatch.MaxMaxDepth, c.MaxNestingDepth)
	}
	if c.MergeFingerprintPolicy != "apply" && c.MergeFingerprintPolicy != "dead-letter" {
		add("SINK_MERGE_FINGERPRINT_POLICY must be apply or dead-letter, got %q", c.MergeFingerprintPolicy)
	}
	if c.ShutdownTimeout <= 0 && !unparsed["SINK_SHUTDOWN_TIMEOUT"] {
		add("SINK_SHUTDOWN_TIMEOUT must be positive, got %s", c.ShutdownTimeout)
	}
	if c.GCHeapFloor < 0 && !unparsed["SINK_GC_HEAP_FLOOR_BYTES"] {
		add("SINK_GC_HEAP_FLOOR_BYTES must be 0 or more, got %d", c.GCHeapFloor)
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
	k := c.Kafka
	switch {
	case len(k.Brokers) > 0 && k.Topic == "":
		add("SINK_KAFKA_BROKERS is set but SINK_KAFKA_TOPIC is not: set both to enable the mutation queue, or neither")
	case len(k.Brokers) == 0 && k.Topic != "":
		add("SINK_KAFKA_TOPIC is set but SINK_KAFKA_BROKERS is not: set both to enable the mutation queue, or neither")
	}
	if k.Enabled() && k.DeadLetter() == k.Topic {
		add("SINK_KAFKA_DEAD_LETTER_TOPIC must differ from SINK_KAFKA_TOPIC")
	}
	// The application accepts a zero backoff; a worker needs one that
	// fits several times in its batch budget.
	if !unparsed["SINK_APPLY_MAX_BACKOFF"] {
		if k.ApplyMaxBackoff <= 0 {
			add("SINK_APPLY_MAX_BACKOFF must be positive, got %s", k.ApplyMaxBackoff)
		} else if k.ApplyMaxBackoff > k.BatchBudget()/4 && !unparsed["SINK_KAFKA_REBALANCE_TIMEOUT"] {
			add("SINK_APPLY_MAX_BACKOFF (%s) must be at most SINK_KAFKA_REBALANCE_TIMEOUT/12 (%s): a worker gives a batch a third of the rebalance timeout, and several attempts must fit in it", k.ApplyMaxBackoff, k.BatchBudget()/4)
		}
	}
	errs = append(errs, c.validatePostgres(unparsed)...)
	errs = append(errs, c.validateStores()...)
	errs = append(errs, c.adapterProblems(unparsed)...)
	errs = append(errs, c.validateSecurity(unparsed))
	errs = append(errs, c.validateObservability())
	return errors.Join(errs...)
}

// CheckMode reports an unknown SINK_MODE, and a worker or all mode
// without the Kafka mutation queue and consumer group. Load checks it;
// bootstrap.Role relies on the same function.
func (c Config) CheckMode() error {
	switch c.Mode {
	case ModeServer:
		return nil
	case ModeWorker, ModeAll:
		if !c.Kafka.Enabled() {
			return fmt.Errorf("SINK_MODE=%s needs a mutation queue: set SINK_KAFKA_BROKERS, SINK_KAFKA_TOPIC and SINK_KAFKA_GROUP_ID", c.Mode)
		}
		if c.Kafka.GroupID == "" {
			return fmt.Errorf("SINK_MODE=%s needs SINK_KAFKA_GROUP_ID (the workers' consumer group)", c.Mode)
		}
		return nil
	default:
		return fmt.Errorf("SINK_MODE must be server, worker or all, got %q", c.Mode)
	}
}

// workerMode reports whether the process runs the worker.
func (c Config) workerMode() bool { return c.Mode == ModeWorker || c.Mode == ModeAll }

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
		MaxNestingDepth:  c.MaxNestingDepth,
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
	a.Scan = application.ScanLimits{PageTime: c.ScanPageTime, MaxScannedPerPage: c.ScanMaxScanned, CountTime: c.CountTime, MaxCountScanned: c.CountMaxScanned}
	a.MinDeadline, a.MinDeadlineSetting = c.MinDeadline, "SINK_MIN_DEADLINE"
	a.AsyncDisabledHint = "set SINK_KAFKA_BROKERS and SINK_KAFKA_TOPIC"
	a.MaxRequestBytesSetting = "SINK_MAX_REQUEST_BYTES"
	return a
}

// MongoDBOptions returns the MongoDB store's options, with the bindings
// of SINK_MONGODB_BINDINGS (the caller adds the tracer provider).
func (c Config) MongoDBOptions() (mongodb.Options, error) {
	o := c.mongoDBOptions()
	b, err := mongodb.ParseBindings(c.MongoDB.Bindings)
	if err != nil {
		return mongodb.Options{}, err
	}
	o.Bindings = b
	return o, nil
}

func (c Config) mongoDBOptions() mongodb.Options {
	o := mongodb.DefaultOptions()
	o.Store = or(c.MongoDB.Store, c.Store)
	o.HiddenField = c.MongoDB.HiddenField
	o.BulkChunk = c.MongoDB.BulkChunk
	o.BulkConcurrency = c.MongoDB.BulkConcurrency
	o.MarkRing = c.IdempotencyRing
	return o
}

// KafkaClient returns the settings of the process's one Kafka client: a
// consumer group member in worker and all modes, a producer only in server
// mode (the caller adds the logger and extra options).
func (c Config) KafkaClient() kafka.ClientConfig {
	cc := kafka.DefaultClientConfig()
	cc.Security = c.Kafka.Security.Kafka()
	cc.Brokers = c.Kafka.Brokers
	cc.ClientID = "sink-" + c.Mode
	cc.PublishTimeout = c.Kafka.PublishTimeout
	// A record carries one document or intent plus its address.
	cc.MaxRecordBytes = c.MaxDocumentBytes + 64<<10
	// Used with GroupID only, but validated in every mode.
	cc.SessionTimeout = c.Kafka.SessionTimeout
	cc.RebalanceTimeout = c.Kafka.RebalanceTimeout
	if c.workerMode() {
		cc.GroupID = c.Kafka.GroupID
		cc.Topic = c.Kafka.Topic
		cc.InstanceID = c.Kafka.InstanceID
	}
	return cc
}

// Queue returns the mutation queue's configuration (the caller adds the
// tracer provider).
func (c Config) Queue() kafka.QueueConfig {
	q := kafka.DefaultQueueConfig()
	q.Topic = c.Kafka.Topic
	q.PublishTimeout = c.Kafka.PublishTimeout
	return q
}

// Subscriber returns the worker's subscriber configuration: its offset
// commit and its pipeline window get a sixth of the rebalance timeout, at
// most the adapter's defaults (the caller adds the fence, logger and
// observer).
func (c Config) Subscriber() kafka.SubscriberConfig {
	s := kafka.DefaultSubscriberConfig()
	s.Topic = c.Kafka.Topic
	s.MaxPollRecords = c.Kafka.MaxPollRecords
	s.CloseTimeout = c.ShutdownTimeout
	s.CommitTimeout = min(s.CommitTimeout, c.Kafka.BatchBudget()/2)
	s.LogEpoch = c.Kafka.LogEpoch
	// Pipelining keeps a rebalance waiting for up to the window and two
	// batches (each within BatchBudget, a third of the rebalance timeout).
	s.PipelineWindow = min(s.PipelineWindow, c.Kafka.BatchBudget()/2)
	return s
}

// Worker returns the worker's configuration: a batch gets a third of the
// rebalance timeout for applying and a sixth for its dead letters, like
// the commit, so it ends well within the rebalance timeout (the caller
// adds the logger, observer and tracer provider).
func (c Config) Worker() kafka.WorkerConfig {
	w := kafka.DefaultWorkerConfig()
	w.Topic = c.Kafka.Topic
	w.DeadLetterTopic = c.Kafka.DeadLetter()
	w.MaxBatch = c.Kafka.MaxPollRecords
	w.BatchTimeout = c.Kafka.BatchBudget()
	w.DeadLetterTimeout = c.Kafka.BatchBudget() / 2
	w.MaxAttempts = c.Kafka.ApplyMaxAttempts
	return w
}

// Names of the settings in the problems of the adapters' and the
// application's Validate, and their variables (see renamed). Configs whose
// messages also appear at run time, after start-up (TLS files re-read by
// auth.ServerTLS, the listeners' addresses, the MongoDB URI), take the
// variable names in the config itself instead (Names, Setting), so that
// those messages name the variable too. A variable
// of "" marks a setting derived from another variable, whose own check
// reports the problem: CommitTimeout, BatchTimeout and DeadLetterTimeout
// are fractions of SINK_KAFKA_REBALANCE_TIMEOUT, which the Kafka client's
// Validate requires to be at least 3s; MaxRecordBytes follows
// SINK_MAX_DOCUMENT_BYTES; the application's apply backoffs follow
// SINK_APPLY_MAX_BACKOFF, which validate requires to be positive.
var (
	applicationNames = []rename{
		{"store name", "SINK_STORE"},
		{"max operations", "SINK_MAX_OPERATIONS"},
		{"max document bytes", "SINK_MAX_DOCUMENT_BYTES"},
		{"max key bytes", "SINK_MAX_KEY_BYTES"},
		{"max name length", "SINK_MAX_NAME_LENGTH"},
		{"max request bytes", "SINK_MAX_REQUEST_BYTES"},
		{"merge: max attempts", "SINK_MERGE_MAX_ATTEMPTS"},
		{"merge: timeout", "SINK_MERGE_TIMEOUT"},
		{"apply retry: max attempts", "SINK_APPLY_MAX_ATTEMPTS"},
		{"apply retry: backoff durations", ""},
		{"apply retry: max backoff", "SINK_APPLY_MAX_BACKOFF"},
		{"batch: max operations", "SINK_BATCH_MAX_OPS"},
		{"batch: shards", "SINK_BATCH_SHARDS"},
		{"idempotency ring", "SINK_IDEMPOTENCY_RING"},
		{"scan: page time", "SINK_SCAN_PAGE_TIME"},
		{"scan: max scanned per page", "SINK_SCAN_MAX_SCANNED"},
		{"count: time", "SINK_COUNT_TIME"},
		{"count: max scanned", "SINK_COUNT_MAX_SCANNED"},
		{"min deadline", "SINK_MIN_DEADLINE"},
	}
	mongoDBNames = []rename{
		{"HiddenField", "SINK_MONGODB_HIDDEN_FIELD"},
		{"BulkChunk", "SINK_MONGODB_BULK_CHUNK"},
		{"BulkConcurrency", "SINK_MONGODB_BULK_CONCURRENCY"},
		{"MarkRing", "SINK_IDEMPOTENCY_RING"},
	}
	kafkaClientNames = []rename{
		{"PublishTimeout", "SINK_KAFKA_PUBLISH_TIMEOUT"},
		{"SessionTimeout", "SINK_KAFKA_SESSION_TIMEOUT"},
		{"RebalanceTimeout", "SINK_KAFKA_REBALANCE_TIMEOUT"},
		{"InstanceID", "SINK_KAFKA_INSTANCE_ID"},
		{"MaxRecordBytes", ""},
	}
	subscriberNames = []rename{
		{"MaxPollRecords", "SINK_KAFKA_MAX_POLL_RECORDS"},
		{"CloseTimeout", "SINK_SHUTDOWN_TIMEOUT"},
		{"CommitTimeout", ""},
		{"LogEpoch", "SINK_KAFKA_LOG_EPOCH"},
	}
	workerNames = []rename{
		{"MaxBatch", "SINK_KAFKA_MAX_POLL_RECORDS"},
		{"BatchTimeout", ""},
		{"DeadLetterTimeout", ""},
		{"MaxAttempts", "SINK_APPLY_MAX_ATTEMPTS"},
	}
	queueNames = []rename{{"PublishTimeout", "SINK_KAFKA_PUBLISH_TIMEOUT"}}
)

// adapterProblems validates the configs the settings map to, with the
// configs' own Validate, and names the variables in the problems. A
// variable whose problems one config reported is not reported again by
// another (SINK_IDEMPOTENCY_RING, for example, is the application's ring
// and the store's).
func (c Config) adapterProblems(unparsed map[string]bool) []error {
	var out []error
	owner := map[string]string{}
	seen := map[string]bool{}
	for _, g := range []struct {
		group string
		err   error
		names []rename
	}{
		{"application", c.Application().Validate(), applicationNames},
		{"health monitor", c.Health().Validate(), healthNames},
		{"metrics", c.Metrics().Validate(), metricsNames},
		{"MongoDB store", c.mongoDBOptions().Validate(), mongoDBNames},
		{"PostgreSQL store", c.postgresOptions().Validate(), postgresNames},
		{"Kafka client", kafkaValues(c.KafkaClient()).Validate(), kafkaClientNames},
		{"Kafka queue", c.Queue().Validate(), queueNames},
		{"Kafka subscriber", c.Subscriber().Validate(), subscriberNames},
		{"worker", c.Worker().Validate(), workerNames},
	} {
		for _, p := range renamed(g.group, g.err, g.names, unparsed) {
			msg := p.Error()
			name := leadingVariable(msg)
			if seen[msg] || (name != "" && owner[name] != "" && owner[name] != g.group) {
				continue
			}
			seen[msg] = true
			if name != "" {
				owner[name] = g.group
			}
			out = append(out, p)
		}
	}
	return out
}

// kafkaValues drops the security settings, which validateSecurity checks.
func kafkaValues(cc kafka.ClientConfig) kafka.ClientConfig {
	cc.Security = kafka.SecurityConfig{}
	return cc
}

// rename maps the words a config's Validate uses for a setting to its
// variable ("" = derived from another variable).
type rename struct{ from, to string }

// renamed turns the problems of a config's Validate into the
// environment's: the names in them become variables (whole words only).
// A problem about a derived setting is dropped (its source's check
// reports it), and so is one that names a variable that could not be
// parsed (its parse error is reported). A problem that still names no
// variable keeps its own words, after the group's name.
func renamed(group string, err error, names []rename, unparsed map[string]bool) []error {
	// Longest first: "batch: max operations" before "max operations".
	names = slices.Clone(names)
	slices.SortStableFunc(names, func(a, b rename) int { return len(b.from) - len(a.from) })
	var out []error
	for _, msg := range flatten([]error{err}) {
		derived := false
		for _, r := range names {
			var ok bool
			if msg, ok = replaceWord(msg, r.from, r.to); ok && r.to == "" {
				derived = true
			}
		}
		if derived {
			continue
		}
		if slices.ContainsFunc(slices.Collect(maps.Keys(unparsed)), func(name string) bool { return containsWord(msg, name) }) {
			continue
		}
		if !strings.Contains(msg, "SINK_") {
			msg = group + ": " + msg
		}
		out = append(out, errors.New(msg))
	}
	return out
}

// replaceWord replaces the occurrences of from in s that are not part of
// a longer identifier, reporting whether there were any.
func replaceWord(s, from, to string) (string, bool) {
	word := func(b byte) bool {
		return b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
	}
	var b strings.Builder
	found := false
	for i := 0; ; {
		j := strings.Index(s[i:], from)
		if j < 0 {
			b.WriteString(s[i:])
			break
		}
		j += i
		end := j + len(from)
		if (j > 0 && word(s[j-1])) || (end < len(s) && word(s[end])) {
			b.WriteString(s[i : j+1])
			i = j + 1
			continue
		}
		b.WriteString(s[i:j])
		b.WriteString(to)
		found = true
		i = end
	}
	return b.String(), found
}

// containsWord reports whether w is in s, not as part of a longer
// identifier.
func containsWord(s, w string) bool {
	_, ok := replaceWord(s, w, w)
	return ok
}

// leadingVariable returns the variable a problem starts with ("" if none).
func leadingVariable(msg string) string {
	if !strings.HasPrefix(msg, "SINK_") {
		return ""
	}
	end := strings.IndexFunc(msg, func(r rune) bool { return r != '_' && (r < 'A' || r > 'Z') && (r < '0' || r > '9') })
	if end < 0 {
		return msg
	}
	return msg[:end]
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

// ConfigTable renders the configuration reference as a Markdown table,
// with the values of Defaults() as defaults. Settings whose group has a
// doc tag are documented in that file instead (SectionTable).
func ConfigTable() string { return SectionTable("") }

// SectionTable renders the table of the settings whose group's doc tag is
// doc ("" is the README's table: the settings without one).
func SectionTable(doc string) string {
	var b strings.Builder
	b.WriteString("| Variable | Default | Description |\n|---|---|---|\n")
	var walk func(v reflect.Value, in string)
	walk = func(v reflect.Value, in string) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := f.Tag.Get("env")
			if name == "" {
				if f.Type.Kind() == reflect.Struct {
					sub := in
					if d := f.Tag.Get("doc"); d != "" {
						sub = d
					}
					walk(v.Field(i), sub)
				}
				continue
			}
			if in != doc {
				continue
			}
			def := formatDefault(v.Field(i))
			if def != "" {
				def = "`" + def + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name, def, strings.ReplaceAll(f.Tag.Get("desc"), "|", "\\|"))
		}
	}
	walk(reflect.ValueOf(Defaults()), "")
	return b.String()
}

// formatDefault renders a default value as a variable would set it
// (durations as 30s, 5m or 1h30m; "" for none).
func formatDefault(v reflect.Value) string {
	if d, ok := v.Interface().(time.Duration); ok {
		s := d.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	}
	switch v.Kind() {
	case reflect.String:
		return v.String()
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = fmt.Sprint(v.Index(i).Interface())
		}
		return strings.Join(parts, ",")
	default:
		return fmt.Sprint(v.Interface())
	}
}
