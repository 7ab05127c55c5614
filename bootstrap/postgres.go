package bootstrap

import (
	"log/slog"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/postgres"
	"github.com/sink-io/sink/ports"
)

// pgConn holds the process's one PostgreSQL connection pool; conn is nil
// when SINK_POSTGRES_URL is empty.
type pgConn struct {
	conn *postgres.Connection
}

// newPgConn creates the pool (no I/O yet); it pings on start, so that a
// database that cannot be reached stops start-up with an error naming its
// hosts (never the password), and closes the pool on stop.
func newPgConn(lc fx.Lifecycle, cfg Config, log *slog.Logger) (*pgConn, error) {
	if !cfg.Postgres.Enabled() {
		return &pgConn{}, nil
	}
	cc := cfg.PostgresConnection()
	cc.Logger = log
	conn, err := postgres.NewConnection(cc)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StartStopHook(conn.Start, conn.Stop))
	return &pgConn{conn: conn}, nil
}

// newPostgresStorage returns the PostgreSQL store over the shared pool.
func newPostgresStorage(cfg Config, log *slog.Logger, c *pgConn, tp trace.TracerProvider) (ports.Storage, error) {
	opts, err := cfg.PostgresOptions()
	if err != nil {
		return nil, err
	}
	opts.TracerProvider = tp
	opts.Secrets = c.conn.Secrets()
	s, err := postgres.New(c.conn.Pool(), opts)
	if err != nil {
		return nil, err
	}
	log.Info("serving from PostgreSQL", "store", opts.Store, "hosts", c.conn.Hosts(), "pool_size", c.conn.PoolSize(), "bindings", len(opts.Bindings))
	return s, nil
}
