package bootstrap

import (
	"errors"
	"log/slog"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/ports"
)

// mongoConn holds the process's one MongoDB connection; conn is nil when
// SINK_MONGODB_URI is empty. Every role of the process shares it.
type mongoConn struct {
	conn *mongodb.Connection
}

// newMongoConn creates the connection (no I/O yet); it pings on start, so
// that a database that cannot be reached stops start-up with an error
// naming its host (never the password), and disconnects on stop.
func newMongoConn(lc fx.Lifecycle, cfg Config, log *slog.Logger) (*mongoConn, error) {
	if cfg.MongoDB.URI == "" {
		return &mongoConn{}, nil
	}
	conn, err := mongodb.NewConnection(mongodb.ConnectionConfig{URI: cfg.MongoDB.URI, Setting: "SINK_MONGODB_URI", Logger: log})
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StartStopHook(conn.Start, conn.Stop))
	return &mongoConn{conn: conn}, nil
}

// mongoClient exposes the raw client (for example to health checks). It is
// an error to ask for it when SINK_MONGODB_URI is empty.
func mongoClient(c *mongoConn) (*mongo.Client, error) {
	if c.conn == nil {
		return nil, errors.New("no MongoDB client: SINK_MONGODB_URI is empty")
	}
	return c.conn.Client(), nil
}

// newStorage returns the MongoDB store over the shared client, the
// PostgreSQL store over the shared pool (postgres.go), or the in-memory
// store (with a warning) when no database is configured.
func newStorage(cfg Config, log *slog.Logger, c *mongoConn, pg *pgConn, tp trace.TracerProvider) (ports.Storage, error) {
	if pg != nil && pg.conn != nil {
		return newPostgresStorage(cfg, log, pg, tp)
	}
	if c.conn == nil {
		log.Warn("no database configured (SINK_MONGODB_URI and SINK_POSTGRES_URL are empty): serving from memory; data is NOT persisted and is lost when the process stops",
			"store", cfg.Store)
		return memory.New(memory.WithTracerProvider(tp)), nil
	}
	opts, err := cfg.MongoDBOptions()
	if err != nil {
		return nil, err
	}
	opts.TracerProvider = tp
	s, err := mongodb.New(c.conn.Client(), opts)
	if err != nil {
		return nil, err
	}
	log.Info("serving from MongoDB", "store", cfg.Store, "hosts", c.conn.Hosts(), "bindings", len(opts.Bindings), "hidden_field", s.HiddenField())
	return s, nil
}
