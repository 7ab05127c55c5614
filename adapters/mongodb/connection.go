package mongodb

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
)

// DefaultConnectTimeout bounds the connection check (a ping) of Start.
const DefaultConnectTimeout = 15 * time.Second

// ConnectionConfig configures a Connection.
type ConnectionConfig struct {
	// URI is the MongoDB connection string. Pool size, timeouts and TLS
	// come from its options.
	URI string
	// Setting names where the URI came from in messages (for example an
	// environment variable; default "the MongoDB URI").
	Setting string
	// AppName is the driver's application name (default "sink").
	AppName string
	// ConnectTimeout bounds Start's ping (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

func (c *ConnectionConfig) setDefaults() {
	if c.Setting == "" {
		c.Setting = "the MongoDB URI"
	}
	if c.AppName == "" {
		c.AppName = "sink"
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Connection is a process's one MongoDB client, shared by every store
// over it. No message of it shows any part of the URI's user info: hosts
// are named as the driver's own parser reads them, and driver messages are
// scrubbed of the URI and its password (see Hosts).
type Connection struct {
	cfg    ConnectionConfig
	client *mongo.Client
}

// NewConnection creates the client; it does no I/O (Start checks that the
// database answers).
func NewConnection(cfg ConnectionConfig) (*Connection, error) {
	cfg.setDefaults()
	client, err := mongo.Connect(options.Client().ApplyURI(cfg.URI).SetAppName(cfg.AppName))
	if err != nil {
		return nil, fmt.Errorf("cannot use %s (hosts %s): %s", cfg.Setting, Hosts(cfg.URI), uriError(cfg.URI, err))
	}
	return &Connection{cfg: cfg, client: client}, nil
}

// Client returns the driver's client.
func (c *Connection) Client() *mongo.Client { return c.client }

// Hosts returns the connection's hosts for messages (see Hosts).
func (c *Connection) Hosts() string { return Hosts(c.cfg.URI) }

// Start pings the primary within ConnectTimeout, so that a database that
// cannot be reached stops start-up with an error naming its hosts (never
// the password); on failure it disconnects.
func (c *Connection) Start(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	if err := c.client.Ping(pctx, readpref.Primary()); err != nil {
		_ = c.client.Disconnect(context.WithoutCancel(ctx))
		return fmt.Errorf("cannot connect to MongoDB at %s (%s) within %s: %s", c.Hosts(), c.cfg.Setting, c.cfg.ConnectTimeout, scrubURI(err.Error(), c.cfg.URI))
	}
	c.cfg.Logger.Info("connected to MongoDB", "hosts", c.Hosts())
	return nil
}

// Stop disconnects the client.
func (c *Connection) Stop(ctx context.Context) error {
	if err := c.client.Disconnect(ctx); err != nil && !errors.Is(err, mongo.ErrClientDisconnected) {
		return fmt.Errorf("cannot disconnect from MongoDB: %s", scrubURI(err.Error(), c.cfg.URI))
	}
	return nil
}

// Hosts returns the host list of a MongoDB URI for messages, as the
// driver's own connection-string parser reads it, never any part of the
// user info. A mongodb+srv URI gives its SRV name (no DNS lookup is made
// here). When the URI does not parse, or the user info is ambiguous (a raw
// '@' or ':' in the password, which the URI format requires to be
// percent-encoded, can make a parser take part of the password for a
// host), the hosts are not shown.
func Hosts(uri string) string {
	parse := uri
	if rest, ok := strings.CutPrefix(uri, connstring.SchemeMongoDBSRV+"://"); ok {
		parse = connstring.SchemeMongoDB + "://" + rest // hosts only: no SRV or TXT lookup
	}
	cs, err := connstring.Parse(parse)
	if err != nil || len(cs.RawHosts) == 0 {
		return "(not shown: the URI does not parse)"
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

const ambiguousHint = "the user info of the MongoDB URI is ambiguous; percent-encode '@', ':', '/', '?' and '%' in the user name and password"

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
		msg = strings.ReplaceAll(msg, uri, "<MongoDB URI>")
	}
	for _, secret := range uriSecrets(uri) {
		msg = strings.ReplaceAll(msg, secret, "xxxxx")
	}
	return strings.ToValidUTF8(msg, "\uFFFD")
}
