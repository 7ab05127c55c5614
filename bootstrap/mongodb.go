package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
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
		return nil, fmt.Errorf("cannot use SINK_MONGODB_URI (hosts %s): %s", mongoHosts(uri), uriError(uri, err))
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

// mongoHosts returns the host list of a MongoDB URI for messages, as the
// driver's own connection-string parser reads it, never any part of the
// user info. A mongodb+srv URI gives its SRV name (no DNS lookup is made
// here). When the URI does not parse, or the user info is ambiguous (a raw
// '@' or ':' in the password, which the URI format requires to be
// percent-encoded, can make a parser take part of the password for a
// host), the hosts are not shown.
func mongoHosts(uri string) string {
	parse := uri
	if rest, ok := strings.CutPrefix(uri, connstring.SchemeMongoDBSRV+"://"); ok {
		parse = connstring.SchemeMongoDB + "://" + rest // hosts only: no SRV or TXT lookup
	}
	cs, err := connstring.Parse(parse)
	if err != nil || len(cs.RawHosts) == 0 {
		return "(not shown: SINK_MONGODB_URI does not parse)"
	}
	if ambiguousUserInfo(uri) {
		return "(not shown: " + ambiguousHint + ")"
	}
	for _, h := range cs.RawHosts {
		for _, secret := range uriSecrets(uri) {
			if strings.Contains(secret, h) {
				return "(not shown: " + ambiguousHint + ")"
			}
		}
	}
	return strings.Join(cs.RawHosts, ",")
}

const ambiguousHint = "the user info of SINK_MONGODB_URI is ambiguous; percent-encode '@', ':', '/', '?' and '%' in the user name and password"

// ambiguousUserInfo reports a URI with more than one '@': a raw '@' in the
// password makes readers disagree where the user info ends, and the
// driver's messages may then quote a part of the password as a host.
func ambiguousUserInfo(uri string) bool { return strings.Count(uri, "@") > 1 }

// uriSecrets returns the strings of uri that messages must not show: its
// password as every reader may delimit it (the driver ends the user info at
// the first '@', URL parsers at the last), as written and percent-decoded,
// longest first.
func uriSecrets(uri string) []string {
	rest := uri
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	var raw []string
	for _, at := range []int{strings.Index(rest, "@"), strings.LastIndex(rest, "@")} {
		if at < 0 {
			continue
		}
		if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
			raw = append(raw, pw)
		}
	}
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, pw := range raw {
		add(pw)
		if d, err := url.PathUnescape(pw); err == nil {
			add(d)
			add(url.QueryEscape(d))
			add(url.PathEscape(d))
		}
		if d, err := url.QueryUnescape(pw); err == nil {
			add(d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// uriError explains why the driver refused uri, without any part of its
// user info: the driver's parse errors may quote it (an invalid
// percent-escape in the password, say). The URI is parsed again with the
// user info replaced; the error of that parse is shown, or, when only the
// user info is wrong, a hint.
func uriError(uri string, err error) string {
	if ambiguousUserInfo(uri) {
		return ambiguousHint
	}
	scheme, rest := "", uri
	if i := strings.Index(uri, "://"); i >= 0 {
		scheme, rest = uri[:i+3], uri[i+3:]
	}
	at := strings.Index(rest, "@")
	if at < 0 {
		return scrubURI(err.Error(), uri)
	}
	if _, perr := connstring.ParseAndValidate(scheme + "user:xxxxx" + rest[at:]); perr != nil {
		return scrubURI(perr.Error(), uri)
	}
	return "the user name or password is not valid: percent-encode '@', ':', '/', '?' and '%' in them"
}

// scrubURI removes the URI and its password from a driver message. When
// the user info is ambiguous the message is not shown at all.
func scrubURI(msg, uri string) string {
	if ambiguousUserInfo(uri) {
		return "(driver message not shown: " + ambiguousHint + ")"
	}
	if uri != "" {
		msg = strings.ReplaceAll(msg, uri, "<SINK_MONGODB_URI>")
	}
	for _, secret := range uriSecrets(uri) {
		msg = strings.ReplaceAll(msg, secret, "xxxxx")
	}
	return strings.ToValidUTF8(msg, "\uFFFD")
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
		MarkRing: cfg.IdempotencyRing,
	})
	if err != nil {
		return nil, err
	}
	log.Info("serving from MongoDB", "store", cfg.Store, "hosts", mongoHosts(cfg.MongoDB.URI), "bindings", len(bindings), "hidden_field", s.HiddenField())
	return s, nil
}
