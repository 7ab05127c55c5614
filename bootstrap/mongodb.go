package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.uber.org/fx"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/ports"
)

// mongoConnectTimeout bounds the connection check (a ping) at start-up.
const mongoConnectTimeout = 15 * time.Second

// mongoConn holds the process's one MongoDB client; client is nil when
// SINK_MONGODB_URI is empty. Every role of the process shares it.
type mongoConn struct {
	client *mongo.Client
}

// newMongoConn creates the client (no I/O yet) and registers its lifecycle:
// OnStart pings within mongoConnectTimeout, so that a database that cannot be
// reached stops start-up with an error naming its host (never the password);
// OnStop disconnects. Pool size, timeouts and TLS come from the URI.
func newMongoConn(lc fx.Lifecycle, cfg Config, log *slog.Logger) (*mongoConn, error) {
	uri := cfg.MongoDB.URI
	if uri == "" {
		return &mongoConn{}, nil
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetAppName("sink"))
	if err != nil {
		return nil, fmt.Errorf("cannot use SINK_MONGODB_URI (hosts %s): %s", mongoHosts(uri), scrubURI(err.Error(), uri))
	}
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			if err := pingMongo(ctx, client, uri, mongoConnectTimeout); err != nil {
				_ = client.Disconnect(context.WithoutCancel(ctx))
				return err
			}
			log.Info("connected to MongoDB", "hosts", mongoHosts(uri))
			return nil
		},
		OnStop: func(ctx context.Context) error {
			if err := client.Disconnect(ctx); err != nil && !errors.Is(err, mongo.ErrClientDisconnected) {
				return fmt.Errorf("cannot disconnect from MongoDB: %s", scrubURI(err.Error(), uri))
			}
			return nil
		},
	})
	return &mongoConn{client: client}, nil
}

// pingMongo checks within timeout that the database answers. The error names
// the hosts of uri and never its password.
func pingMongo(ctx context.Context, client *mongo.Client, uri string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := client.Ping(ctx, readpref.Primary()); err != nil {
		return fmt.Errorf("cannot connect to MongoDB at %s (SINK_MONGODB_URI) within %s: %s", mongoHosts(uri), timeout, scrubURI(err.Error(), uri))
	}
	return nil
}

// mongoHosts returns the host list of a MongoDB URI, without credentials.
func mongoHosts(uri string) string {
	rest := uri
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	if rest == "" {
		return "(none)"
	}
	return rest
}

// scrubURI removes the URI and its password from a driver message.
func scrubURI(msg, uri string) string {
	if uri != "" {
		msg = strings.ReplaceAll(msg, uri, "<SINK_MONGODB_URI>")
	}
	if u, err := url.Parse(uri); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
			if esc := url.QueryEscape(pw); esc != pw {
				msg = strings.ReplaceAll(msg, esc, "xxxxx")
			}
		}
	} else {
		// An unparsable URI may carry its password anywhere between "://" and "@".
		rest := uri
		if i := strings.Index(rest, "://"); i >= 0 {
			rest = rest[i+3:]
		}
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			if _, pw, ok := strings.Cut(rest[:i], ":"); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
	}
	return msg
}

// mongoClient exposes the raw client (for example to health checks). It is
// an error to ask for it when SINK_MONGODB_URI is empty.
func mongoClient(c *mongoConn) (*mongo.Client, error) {
	if c.client == nil {
		return nil, errors.New("no MongoDB client: SINK_MONGODB_URI is empty")
	}
	return c.client, nil
}

// newStorage returns the MongoDB store over the shared client, or the
// in-memory store (with a warning) when no database is configured.
func newStorage(cfg Config, log *slog.Logger, c *mongoConn) (ports.Storage, error) {
	if c.client == nil {
		log.Warn("no database configured (SINK_MONGODB_URI is empty): serving from memory; data is NOT persisted and is lost when the process stops",
			"store", cfg.Store)
		return memory.New(), nil
	}
	bindings, err := mongodb.ParseBindings(cfg.MongoDB.Bindings)
	if err != nil {
		return nil, err
	}
	s, err := mongodb.New(c.client, mongodb.Options{
		Store: cfg.Store, HiddenField: cfg.MongoDB.HiddenField, Bindings: bindings,
		BulkChunk: cfg.MongoDB.BulkChunk, BulkConcurrency: cfg.MongoDB.BulkConcurrency,
	})
	if err != nil {
		return nil, err
	}
	log.Info("serving from MongoDB", "store", cfg.Store, "hosts", mongoHosts(cfg.MongoDB.URI), "bindings", len(bindings), "hidden_field", s.HiddenField())
	return s, nil
}
