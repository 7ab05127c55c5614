// Package client is the Go client of Sink: typed dataset handles over the
// gRPC API, batches split by the server's limits, retries that cannot
// double a write, and key-affinity routing over several servers.
//
// A Client holds one gRPC connection per server; its lifecycle is the
// caller's (Close). A Dataset names store, namespace and dataset and
// carries a codec (JSON by default, or BSON):
//
//	c, err := client.New("sink.example:8080", client.WithBearerToken(token))
//	…
//	orders := c.Dataset("shop", "orders")
//	rev, err := orders.Put(ctx, client.StringKey("o-1"), Order{Total: 12})
//	_, err = orders.Get(ctx, client.StringKey("o-1"), &o)
//	if errors.Is(err, client.ErrNotFound) { … }
//
// Retries: reads are retried on retryable failures with backoff and
// jitter, resending only the failed operations. A write (put, merge,
// delete) is resent only when that cannot apply it twice: the server said
// it was not applied (the request never left, the server refused the
// whole request, or the operation failed with UNAVAILABLE,
// RESOURCE_EXHAUSTED or ABORTED), or it carries an idempotency key
// (WithIdempotencyKey, or WithAutoIdempotencyKeys). A write without a key
// whose outcome is unknown fails with ErrOutcomeUnknown and is never resent.
//
// Routing: with WithServers or WithDNSRouting, each record goes to the
// server a rendezvous hash of its address (store, namespace, dataset, key)
// picks, so that the merges of one record meet on one server and fold
// there; a batch is split per server; a server failing at the transport
// level is skipped for a cooldown and its records go to their next choice.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
	"github.com/sink-io/sink/proto/vtcodec"
)

// Client is a connection to one Sink server or a fleet of them. It is safe
// for concurrent use.
type Client struct {
	cfg    config
	target string
	md     metadata.MD // the bearer token, if any

	mu      sync.RWMutex
	servers []*server // sorted by address
	retired []*server // removed by a re-resolution, closed after a grace period or by Close
	closed  bool

	stop chan struct{}
	wg   sync.WaitGroup
}

type server struct {
	addr      string
	hash      uint64
	conn      *grpc.ClientConn
	stub      sinkv1.SinkClient
	downUntil atomic.Int64 // unix nanoseconds
}

// New connects to target (host:port, or any grpc-go target such as
// "dns:///sink:8080"). Connections are made lazily; New fails only on bad
// options or an unresolvable WithDNSRouting target.
func New(target string, opts ...Option) (*Client, error) {
	cfg := config{
		maxOps: DefaultMaxOperations, maxBytes: DefaultMaxRequestBytes,
		maxAttempts: DefaultMaxAttempts, baseBackoff: DefaultBaseBackoff, maxBackoff: DefaultMaxBackoff,
		cooldown: time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	c := &Client{cfg: cfg, target: target, stop: make(chan struct{})}
	if cfg.token != "" {
		c.md = metadata.Pairs("authorization", "Bearer "+cfg.token)
	}
	addrs := cfg.servers
	host := ""
	switch {
	case len(addrs) > 0:
	case cfg.dnsRefresh > 0:
		var err error
		host, _, err = net.SplitHostPort(target)
		if err != nil {
			return nil, fmt.Errorf("sink: WithDNSRouting needs a host:port target: %w", err)
		}
		if addrs, err = c.resolve(context.Background()); err != nil {
			return nil, err
		}
	default:
		addrs = []string{target}
	}
	if err := c.setServers(addrs, host); err != nil {
		c.closeAll()
		return nil, err
	}
	if cfg.dnsRefresh > 0 && len(cfg.servers) == 0 {
		c.wg.Add(1)
		go c.refresh(host)
	}
	return c, nil
}

// resolve returns the sorted host:port addresses of the target.
func (c *Client) resolve(ctx context.Context) ([]string, error) {
	host, port, err := net.SplitHostPort(c.target)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lookup := c.cfg.lookup
	if lookup == nil {
		lookup = net.DefaultResolver.LookupHost
	}
	ips, err := lookup(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("sink: cannot resolve %s: %w", host, err)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("sink: %s resolves to no address", host)
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, net.JoinHostPort(ip, port))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// refresh re-resolves the target every cfg.dnsRefresh until Close.
func (c *Client) refresh(host string) {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.dnsRefresh)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		addrs, err := c.resolve(context.Background())
		if err != nil || len(addrs) == 0 {
			continue // keep the servers we have
		}
		_ = c.setServers(addrs, host)
	}
}

// setServers replaces the server set, keeping the connections of servers
// that stay; those of removed servers close after a grace period so that
// calls in flight finish.
func (c *Client) setServers(addrs []string, host string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("sink: client is closed")
	}
	old := make(map[string]*server, len(c.servers))
	for _, s := range c.servers {
		old[s.addr] = s
	}
	next := make([]*server, 0, len(addrs))
	for _, a := range addrs {
		if s, ok := old[a]; ok {
			next = append(next, s)
			delete(old, a)
			continue
		}
		conn, err := grpc.NewClient(a, c.dialOptions(host)...)
		if err != nil {
			return fmt.Errorf("sink: %s: %w", a, err)
		}
		next = append(next, &server{addr: a, hash: hashString(fnvOffset, a), conn: conn, stub: sinkv1.NewSinkClient(conn)})
	}
	slices.SortFunc(next, func(a, b *server) int { return cmpString(a.addr, b.addr) })
	c.servers = next
	for _, s := range old {
		c.retired = append(c.retired, s)
		time.AfterFunc(30*time.Second, func() {
			_ = s.conn.Close()
			c.mu.Lock()
			c.retired = slices.DeleteFunc(c.retired, func(r *server) bool { return r == s })
			c.mu.Unlock()
		})
	}
	return nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (c *Client) dialOptions(host string) []grpc.DialOption {
	var creds credentials.TransportCredentials
	switch {
	case c.cfg.insecure:
		creds = insecure.NewCredentials()
	default:
		cfg := c.cfg.tls
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if host != "" && cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		creds = credentials.NewTLS(cfg)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(vtcodec.New()))}
	if !c.cfg.noTrace {
		opts = append(opts, grpc.WithStatsHandler(tracer{}))
	}
	return append(opts, c.cfg.dialOpts...)
}

// Close closes every connection; calls in flight fail.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.stop)
	c.mu.Unlock()
	c.wg.Wait()
	return c.closeAll()
}

func (c *Client) closeAll() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, s := range c.servers {
		errs = append(errs, s.conn.Close())
	}
	for _, s := range c.retired {
		_ = s.conn.Close() // perhaps closed already
	}
	c.servers, c.retired = nil, nil
	return errors.Join(errs...)
}

// Servers returns the addresses the client routes over, sorted.
func (c *Client) Servers() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, len(c.servers))
	for i, s := range c.servers {
		out[i] = s.addr
	}
	return out
}

// single reports whether the client has at most one server.
func (c *Client) single() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.servers) <= 1
}

// pick returns the server for a record: the highest rendezvous score
// among the servers not cooling down after a failure (among all if every
// one is).
func (c *Client) pick(route uint64, now int64) *server {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.servers) == 1 {
		return c.servers[0]
	}
	var best, bestAny *server
	var score, scoreAny uint64
	for _, s := range c.servers {
		v := mix(route ^ s.hash)
		if bestAny == nil || v > scoreAny {
			bestAny, scoreAny = s, v
		}
		if s.downUntil.Load() > now {
			continue
		}
		if best == nil || v > score {
			best, score = s, v
		}
	}
	if best == nil {
		return bestAny
	}
	return best
}

// ServerFor returns the address of the server that key-affinity routing
// currently picks for the record (store "" is the served store).
func (c *Client) ServerFor(store, namespace, dataset string, key Key) string {
	s := c.pick(routeHash(store, namespace, dataset, key), time.Now().UnixNano())
	if s == nil {
		return ""
	}
	return s.addr
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func hashString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// routeHash hashes a record address (store, namespace, dataset, key).
func routeHash(store, namespace, dataset string, key Key) uint64 {
	h := hashString(fnvOffset, store)
	h = hashString(h*fnvPrime, namespace)
	h = hashString(h*fnvPrime, dataset)
	var buf [32]byte
	return hashString(h*fnvPrime, string(key.appendRoute(buf[:0])))
}

// mix is splitmix64's finalizer: a well-spread score for (record, server).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// callTrace records what happened to one call on the wire: whether the
// request left the client and whether the server answered with a status.
type callTrace struct {
	sent, answered atomic.Bool
}

type traceKey struct{}

// tracer is the stats handler that fills the callTrace of a call's context.
type tracer struct{}

func (tracer) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (tracer) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (tracer) HandleConn(context.Context, stats.ConnStats) {}
func (tracer) HandleRPC(ctx context.Context, s stats.RPCStats) {
	t, _ := ctx.Value(traceKey{}).(*callTrace)
	if t == nil {
		return
	}
	switch s.(type) {
	case *stats.OutPayload:
		t.sent.Store(true)
	case *stats.InTrailer:
		t.answered.Store(true)
	}
}
