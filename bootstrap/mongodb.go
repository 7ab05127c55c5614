package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/bootstrap/envconfig"
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

// ExtraStores are the storages of the stores a process serves besides the
// default one (envconfig.Config.Stores), by store name; empty when it
// serves one store.
type ExtraStores map[string]ports.Storage

// newStorages returns the storage of the default store and of every other
// store the process serves: MongoDB over the shared client, PostgreSQL
// over the shared pool (postgres.go), memory (with a warning when no
// database is configured at all).
func newStorages(cfg Config, log *slog.Logger, c *mongoConn, pg *pgConn, tp trace.TracerProvider) (ports.Storage, ExtraStores, error) {
	var def ports.Storage
	extra := ExtraStores{}
	for _, b := range cfg.Stores() {
		var st ports.Storage
		var err error
		switch b.Kind {
		case envconfig.StoreMongoDB:
			st, err = newMongoStorage(cfg, log, c, tp)
		case envconfig.StorePostgres:
			st, err = newPostgresStorage(cfg, log, pg, tp)
		default:
			if cfg.MemoryStore == "" {
				log.Warn("no database configured (SINK_MONGODB_URI and SINK_POSTGRES_URL are empty): serving from memory; data is NOT persisted and is lost when the process stops",
					"store", b.Name)
			} else {
				log.Info("serving from memory; data is NOT persisted", "store", b.Name)
			}
			st = memory.New(memory.WithTracerProvider(tp))
		}
		if err != nil {
			return nil, nil, err
		}
		if b.Name == cfg.Store {
			def = st
		} else {
			extra[b.Name] = st
		}
	}
	return def, extra, nil
}

// newMongoStorage returns the MongoDB store over the shared client.
func newMongoStorage(cfg Config, log *slog.Logger, c *mongoConn, tp trace.TracerProvider) (ports.Storage, error) {
	opts, err := cfg.MongoDBOptions()
	if err != nil {
		return nil, err
	}
	opts.TracerProvider = tp
	s, err := mongodb.New(c.conn.Client(), opts)
	if err != nil {
		return nil, err
	}
	log.Info("serving from MongoDB", "store", opts.Store, "hosts", c.conn.Hosts(), "bindings", len(opts.Bindings), "hidden_field", s.HiddenField())
	return s, nil
}

// Ping pings every store, naming the first that does not answer.
func (e ExtraStores) Ping(ctx context.Context) error {
	names := slices.Sorted(maps.Keys(e))
	for _, n := range names {
		if err := e[n].Ping(ctx); err != nil {
			return fmt.Errorf("store %q: %w", n, err)
		}
	}
	return nil
}
