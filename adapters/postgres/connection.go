package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Connection defaults.
const (
	DefaultConnectTimeout = 15 * time.Second
	DefaultPoolSize       = 16
)

// ConnectionConfig configures a Connection.
type ConnectionConfig struct {
	// URL is a pgx connection string: a postgres:// URL or key=value
	// pairs (TLS through sslmode, sslrootcert, sslcert, sslkey).
	URL string
	// Setting names where the URL came from in messages (default "the
	// PostgreSQL URL").
	Setting string
	// PoolSize is the most connections (0: the URL's pool_max_conns, else
	// DefaultPoolSize).
	PoolSize int
	// StatementTimeout, when positive, is every statement's
	// statement_timeout on the server.
	StatementTimeout time.Duration
	// ConnectTimeout bounds Start's ping (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// AppName is the application_name (default "sink").
	AppName string
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Connection is a process's PostgreSQL connection pool. No message of it
// shows any part of the password: hosts are named as pgx reads them, and
// pgx's messages are scrubbed of the URL and the password.
type Connection struct {
	cfg     ConnectionConfig
	pool    *pgxpool.Pool
	secrets []string
	hosts   string
}

// NewConnection parses the URL and creates the pool; it does no I/O (Start
// checks that the database answers).
func NewConnection(cfg ConnectionConfig) (*Connection, error) {
	if cfg.Setting == "" {
		cfg.Setting = "the PostgreSQL URL"
	}
	if cfg.AppName == "" {
		cfg.AppName = "sink"
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	secrets := urlSecrets(cfg.URL)
	if ambiguousUserInfo(cfg.URL) {
		return nil, fmt.Errorf("cannot use %s: %s", cfg.Setting, ambiguousHint)
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("cannot use %s: %s", cfg.Setting, parseProblem(cfg.URL, secrets))
	}
	if pw := pc.ConnConfig.Password; pw != "" {
		secrets = addSecrets(secrets, pw)
	}
	if cfg.PoolSize > 0 {
		pc.MaxConns = int32(cfg.PoolSize)
	} else if !strings.Contains(cfg.URL, "pool_max_conns") {
		pc.MaxConns = DefaultPoolSize
	}
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	if _, ok := pc.ConnConfig.RuntimeParams["application_name"]; !ok {
		pc.ConnConfig.RuntimeParams["application_name"] = cfg.AppName
	}
	if cfg.StatementTimeout > 0 {
		pc.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(cfg.StatementTimeout.Milliseconds(), 10)
	}
	hosts := []string{net.JoinHostPort(pc.ConnConfig.Host, strconv.Itoa(int(pc.ConnConfig.Port)))}
	for _, f := range pc.ConnConfig.Fallbacks {
		hosts = append(hosts, net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))))
	}
	h := strings.Join(hosts, ",")
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, fmt.Errorf("cannot use %s (hosts %s): %s", cfg.Setting, h, scrub(err.Error(), secrets))
	}
	return &Connection{cfg: cfg, pool: pool, secrets: secrets, hosts: h}, nil
}

// Pool returns the connection pool.
func (c *Connection) Pool() *pgxpool.Pool { return c.pool }

// Secrets returns the strings no message may show (for Options.Secrets).
func (c *Connection) Secrets() []string { return c.secrets }

// Hosts returns the hosts for messages.
func (c *Connection) Hosts() string { return c.hosts }

// PoolSize returns the pool's most connections.
func (c *Connection) PoolSize() int { return int(c.pool.Config().MaxConns) }

// Start pings the database within ConnectTimeout, so that a database that
// cannot be reached stops start-up with an error naming its hosts (never
// the password); on failure it closes the pool.
func (c *Connection) Start(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, c.cfg.ConnectTimeout)
	defer cancel()
	if err := c.pool.Ping(pctx); err != nil {
		c.pool.Close()
		return fmt.Errorf("cannot connect to PostgreSQL at %s (%s) within %s: %s", c.hosts, c.cfg.Setting, c.cfg.ConnectTimeout, errorText(err, c.secrets))
	}
	c.cfg.Logger.Info("connected to PostgreSQL", "hosts", c.hosts, "pool_size", c.PoolSize())
	return nil
}

// Stop closes the pool (waiting for connections in use to come back).
func (c *Connection) Stop(context.Context) error {
	c.pool.Close()
	return nil
}

const ambiguousHint = "the user info of the URL is ambiguous: percent-encode '@', ':', '/', '?', '#' and '%' in the user name and password"

// ambiguousUserInfo reports a URL whose user info holds a raw '@', '/',
// '?' or '#': readers disagree where it ends, and a part of the password
// could be taken for the host, the database or an option, and shown.
func ambiguousUserInfo(raw string) bool {
	i := strings.Index(raw, "://")
	if i < 0 {
		return false
	}
	rest := raw[i+3:]
	at := strings.LastIndex(rest, "@")
	return at >= 0 && strings.ContainsAny(rest[:at], "/?#@")
}

// urlSecrets returns the strings of a connection string that messages must
// not show: the whole string, and the password as every reader may
// delimit it (the user info ending at the first or the last '@'), as
// written and decoded, and the value of a password= key.
func urlSecrets(raw string) []string {
	out := []string{raw}
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		for _, at := range []int{strings.Index(rest, "@"), strings.LastIndex(rest, "@")} {
			if at < 0 {
				continue
			}
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				out = addSecrets(out, pw)
			}
		}
	}
	for _, sep := range []string{"password=", "password = "} {
		for s := raw; ; {
			i := strings.Index(s, sep)
			if i < 0 {
				break
			}
			v := s[i+len(sep):]
			if end := strings.IndexAny(v, " &"); end >= 0 && !strings.HasPrefix(v, "'") {
				v = v[:end]
			}
			out = addSecrets(out, strings.Trim(v, "'"))
			s = s[i+len(sep):]
		}
	}
	return out
}

// addSecrets adds pw in its written, decoded and encoded forms, keeping
// the list longest first (so that a longer secret is replaced before a
// part of it).
func addSecrets(out []string, pw string) []string {
	add := func(s string) {
		for _, o := range out {
			if o == s {
				return
			}
		}
		if len(s) >= 3 {
			out = append(out, s)
		}
	}
	add(pw)
	if d, err := url.PathUnescape(pw); err == nil {
		add(d)
		add(url.QueryEscape(d))
		add(url.PathEscape(d))
	}
	if d, err := url.QueryUnescape(pw); err == nil {
		add(d)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// parseProblem explains why pgx refused a connection string without any
// part of its user info: pgx's and net/url's errors quote the string (an
// invalid percent-escape in the password, say). A URL is parsed again with
// the user info replaced and the error of that parse is shown; when only
// the user info is wrong, a hint.
func parseProblem(raw string, secrets []string) string {
	const hint = "the user name or password does not parse: percent-encode '@', ':', '/', '?' and '%' in them"
	i := strings.Index(raw, "://")
	if i < 0 {
		return "the key=value connection string does not parse (quote values with spaces in single quotes)"
	}
	scheme, rest := raw[:i+3], raw[i+3:]
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		if _, err := pgxpool.ParseConfig(raw); err != nil {
			return scrub(err.Error(), secrets)
		}
		return "the URL does not parse"
	}
	if _, err := pgxpool.ParseConfig(scheme + "user:xxxxx" + rest[at:]); err != nil {
		return scrub(strings.ReplaceAll(err.Error(), scheme+"user:xxxxx"+rest[at:], "<URL>"), secrets)
	}
	return hint
}
