package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
)

// Default limits, the server's defaults (SINK_MAX_OPERATIONS and
// SINK_MAX_REQUEST_BYTES). A batch is split so that no request exceeds
// them; set WithLimits to the values of a server configured otherwise.
const (
	DefaultMaxOperations   = 1000
	DefaultMaxRequestBytes = 32 << 20
)

// Default retry settings.
const (
	DefaultMaxAttempts = 4
	DefaultBaseBackoff = 25 * time.Millisecond
	DefaultMaxBackoff  = time.Second
)

type config struct {
	tls          *tls.Config
	insecure     bool
	token        string
	dialOpts     []grpc.DialOption
	servers      []string
	dnsRefresh   time.Duration
	maxOps       int
	maxBytes     int
	maxAttempts  int
	baseBackoff  time.Duration
	maxBackoff   time.Duration
	attemptLimit time.Duration
	autoKeys     bool
	wholeBatches bool // a batch goes whole to one server (WithWholeBatches)
	cooldown     time.Duration
	noTrace      bool
	lookup       func(ctx context.Context, host string) ([]string, error) // tests replace the resolver
	err          error
}

// Option configures a Client.
type Option func(*config)

// WithTLS connects with TLS configured by cfg (for example its RootCAs).
// Without WithTLS, WithMTLS or WithInsecure the client uses TLS with the
// system's roots.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) { c.tls, c.insecure = cfg.Clone(), false }
}

// WithMTLS connects with TLS, presenting the client certificate of
// certFile and keyFile (PEM) and trusting the CA certificates of caFile
// ("" for the system's roots), as the server's SINK_TLS_CLIENT_CA_FILE
// expects.
func WithMTLS(certFile, keyFile, caFile string) Option {
	return func(c *config) {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			c.err = errors.Join(c.err, fmt.Errorf("sink: client certificate: %w", err))
			return
		}
		cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				c.err = errors.Join(c.err, fmt.Errorf("sink: CA file: %w", err))
				return
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				c.err = errors.Join(c.err, fmt.Errorf("sink: CA file %s holds no PEM certificate", caFile))
				return
			}
			cfg.RootCAs = pool
		}
		c.tls, c.insecure = cfg, false
	}
}

// WithInsecure connects without TLS (loopback and tests only: a bearer
// token then travels in clear text).
func WithInsecure() Option { return func(c *config) { c.insecure, c.tls = true, nil } }

// WithBearerToken sends "authorization: Bearer <token>" with every call,
// as the server's SINK_AUTH_TOKEN_FILE expects.
func WithBearerToken(token string) Option { return func(c *config) { c.token = token } }

// WithDialOptions adds grpc-go dial options (interceptors, keepalive, …)
// to every connection.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOpts = append(c.dialOpts, opts...) }
}

// WithServers routes by key affinity over a static list of server
// addresses (host:port): each record goes to the server a rendezvous hash
// of its address picks, and to the next choice while that one fails. The
// target passed to New is then only a name for messages.
func WithServers(addrs ...string) Option {
	return func(c *config) { c.servers = append([]string(nil), addrs...) }
}

// WithDNSRouting resolves the target (host:port) to all its addresses and
// routes by key affinity over them (as WithServers), resolving again every
// refresh (at least one second).
func WithDNSRouting(refresh time.Duration) Option {
	return func(c *config) { c.dnsRefresh = max(refresh, time.Second) }
}

// WithLimits sets the most operations and bytes (of keys, documents and
// merge intents) a request may carry; batches are split to respect both.
// Use the server's SINK_MAX_OPERATIONS and SINK_MAX_REQUEST_BYTES.
func WithLimits(maxOperations, maxRequestBytes int) Option {
	return func(c *config) {
		if maxOperations > 0 {
			c.maxOps = maxOperations
		}
		if maxRequestBytes > 0 {
			c.maxBytes = maxRequestBytes
		}
	}
}

// WithRetry sets the most attempts of one operation (1: never retry) and
// the bounds of the exponential backoff with full jitter between them.
func WithRetry(maxAttempts int, base, maxBackoff time.Duration) Option {
	return func(c *config) {
		c.maxAttempts = max(maxAttempts, 1)
		if base > 0 {
			c.baseBackoff = base
		}
		if maxBackoff > 0 {
			c.maxBackoff = maxBackoff
		}
	}
}

// WithAttemptTimeout bounds each attempt (each request sent); a write
// whose attempt timed out after it was sent has an unknown outcome. Zero
// (the default) leaves only the caller's context deadline.
func WithAttemptTimeout(d time.Duration) Option { return func(c *config) { c.attemptLimit = d } }

// WithAutoIdempotencyKeys gives every put, merge and delete that has no
// idempotency key a random one, kept across its retries, so that writes
// whose outcome is unknown are retried and applied at most once (within
// the server's idempotency window, SINK_IDEMPOTENCY_RING).
func WithAutoIdempotencyKeys() Option { return func(c *config) { c.autoKeys = true } }

// WithWholeBatches sends a batch of several operations whole to one
// server (the one key affinity picks for its first operation) instead of
// splitting it per server. Each server folds only the merges it receives,
// so this gives up affinity for the batch's other records; see
// docs/client.md for what each costs.
func WithWholeBatches() Option { return func(c *config) { c.wholeBatches = true } }

// WithFailoverCooldown sets how long a server that failed at the transport
// level is skipped by key-affinity routing (default one second).
func WithFailoverCooldown(d time.Duration) Option { return func(c *config) { c.cooldown = d } }

// WithoutCallTracing drops the gRPC stats handler with which the client
// learns, for a failed request, whether it left the client and whether the
// server answered it with a status (about 16 allocations per call). Without
// it every whole-request failure of a write without an idempotency key is
// taken as an unknown outcome (ErrOutcomeUnknown, never resent): fewer
// safe retries for a little less work per call.
func WithoutCallTracing() Option { return func(c *config) { c.noTrace = true } }
