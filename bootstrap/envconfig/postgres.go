package envconfig

import (
	"fmt"
	"time"

	"github.com/sink-io/sink/adapters/postgres"
)

// PostgresConfig selects and configures the PostgreSQL storage adapter
// (postgres.Options, postgres.ConnectionConfig).
type PostgresConfig struct {
	URL              string        `env:"SINK_POSTGRES_URL" desc:"PostgreSQL connection string: a postgres:// URL (percent-encode the password) or key=value pairs; TLS through sslmode, sslrootcert, sslcert and sslkey. When set, PostgreSQL serves SINK_POSTGRES_STORE."`
	Store            string        `env:"SINK_POSTGRES_STORE" desc:"Name of the store PostgreSQL serves. Empty: SINK_STORE."`
	PoolSize         int           `env:"SINK_POSTGRES_POOL_SIZE" desc:"Most connections to PostgreSQL (one Write call holds one for its transaction)."`
	StatementTimeout time.Duration `env:"SINK_POSTGRES_STATEMENT_TIMEOUT" desc:"statement_timeout of every statement on the server (0: the server's setting). A statement stopped by it is rolled back and fails with a retryable UNAVAILABLE."`
	ScanStreams      int           `env:"SINK_POSTGRES_SCAN_STREAMS" desc:"Most pool connections that Scan calls hold at once, each for one streaming SELECT read through all the call's pages (0: half of SINK_POSTGRES_POOL_SIZE, at most all but one; -1: none, every page is a query of its own). A Scan that finds none free reads a query per page until one is."`
	ScanStreamIdle   time.Duration `env:"SINK_POSTGRES_SCAN_STREAM_IDLE" desc:"How long a Scan call's streaming SELECT that nobody reads (a slow client) keeps its connection and snapshot before it is canceled; its next page starts a new SELECT after the last key."`
	Bindings         string        `env:"SINK_POSTGRES_BINDINGS" desc:"JSON array binding logical namespace/dataset pairs to existing tables with a key column (bigint, text, uuid, bytea) and a document column (jsonb, json, text, bytea), e.g. [{\"namespace\":\"shop\",\"dataset\":\"orders\",\"schema\":\"public\",\"table\":\"orders\",\"key_column\":\"id\",\"key_type\":\"bigint\",\"document_column\":\"body\",\"document_type\":\"jsonb\"}]. See docs/postgres.md."`
}

var postgresNames = []rename{{"MarkRing", "SINK_IDEMPOTENCY_RING"}, {"MaxAttempts", ""},
	{"ScanStreamIdle", "SINK_POSTGRES_SCAN_STREAM_IDLE"}, {"ScanStreams", "SINK_POSTGRES_SCAN_STREAMS"}}

func postgresDefaults() PostgresConfig {
	return PostgresConfig{PoolSize: postgres.DefaultPoolSize, ScanStreamIdle: postgres.DefaultScanStreamIdle}
}

// Enabled reports whether PostgreSQL storage is configured.
func (p PostgresConfig) Enabled() bool { return p.URL != "" }

func (c Config) validatePostgres(unparsed map[string]bool) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	p := c.Postgres
	if p.PoolSize < 1 && !unparsed["SINK_POSTGRES_POOL_SIZE"] {
		add("SINK_POSTGRES_POOL_SIZE must be at least 1, got %d", p.PoolSize)
	}
	if p.StatementTimeout < 0 && !unparsed["SINK_POSTGRES_STATEMENT_TIMEOUT"] {
		add("SINK_POSTGRES_STATEMENT_TIMEOUT must not be negative, got %s", p.StatementTimeout)
	}
	if p.ScanStreams < -1 && !unparsed["SINK_POSTGRES_SCAN_STREAMS"] {
		add("SINK_POSTGRES_SCAN_STREAMS must be -1 (none), 0 (half the pool) or a number of connections, got %d", p.ScanStreams)
	}
	if _, err := postgres.ParseBindings(p.Bindings); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// PostgresOptions returns the PostgreSQL store's options, with the
// bindings of SINK_POSTGRES_BINDINGS (the caller adds the tracer provider
// and the connection's secrets).
func (c Config) PostgresOptions() (postgres.Options, error) {
	o := c.postgresOptions()
	b, err := postgres.ParseBindings(c.Postgres.Bindings)
	if err != nil {
		return postgres.Options{}, err
	}
	o.Bindings = b
	return o, nil
}

func (c Config) postgresOptions() postgres.Options {
	o := postgres.DefaultOptions()
	o.Store = or(c.Postgres.Store, c.Store)
	o.MarkRing = c.IdempotencyRing
	o.ScanStreams, o.ScanStreamIdle = c.Postgres.ScanStreams, c.Postgres.ScanStreamIdle
	return o
}

// PostgresConnection returns the connection settings (the caller adds the
// logger).
func (c Config) PostgresConnection() postgres.ConnectionConfig {
	return postgres.ConnectionConfig{
		URL:              c.Postgres.URL,
		Setting:          "SINK_POSTGRES_URL",
		PoolSize:         c.Postgres.PoolSize,
		StatementTimeout: c.Postgres.StatementTimeout,
	}
}
