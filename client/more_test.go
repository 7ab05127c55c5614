package client_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/client"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/testcerts"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/sinktest"
)

// failingStore fails every put with the given code, without applying it,
// while fail reports true; it counts the puts it applied.
type failingStore struct {
	ports.Storage
	code    domain.Code
	fail    func(ports.WriteOp) bool
	applied atomic.Int32
}

func (f *failingStore) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	res := make([]ports.WriteResult, len(ops))
	var pass []ports.WriteOp
	var at []int
	for i, op := range ops {
		if f.fail(op) {
			res[i].Err = domain.Errorf(f.code, "injected %s", f.code)
			continue
		}
		pass, at = append(pass, op), append(at, i)
	}
	if len(pass) > 0 {
		for j, r := range f.Storage.Write(ctx, pass) {
			res[at[j]] = r
			if r.Err == nil {
				f.applied.Add(1)
			}
		}
	}
	return res
}

// A per-operation error whose semantics say "not applied" (UNAVAILABLE)
// lets the client resend a write without an idempotency key; one whose
// outcome is unknown does not.
func TestWriteNotAppliedIsResentWithoutKey(t *testing.T) {
	for _, tc := range []struct {
		code     domain.Code
		resent   bool
		sentinel error
	}{
		{domain.CodeUnavailable, true, nil},
		{domain.CodeOutcomeUnknown, false, client.ErrOutcomeUnknown},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			var requests atomic.Int32
			st := &failingStore{Storage: memory.New(), code: tc.code}
			st.fail = func(ports.WriteOp) bool { return requests.Load() < 2 } // fail until the client resends
			srv := sinktest.Start(t, sinktest.WithStorage(st))
			count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				requests.Add(1)
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			c := srv.NewClient(t, client.WithDialOptions(grpc.WithUnaryInterceptor(count)), client.WithRetry(3, time.Millisecond, 5*time.Millisecond))
			_, err := c.Dataset("ns", "ds").Put(context.Background(), client.StringKey("k"), map[string]int{"a": 1})
			if tc.resent {
				if err != nil || requests.Load() != 2 || st.applied.Load() != 1 {
					t.Fatalf("Put = %v after %d requests, %d applied; want success on the second request, applied once", err, requests.Load(), st.applied.Load())
				}
				return
			}
			if !errors.Is(err, tc.sentinel) || requests.Load() != 1 {
				t.Fatalf("Put = %v after %d requests; want %v after one", err, requests.Load(), tc.sentinel)
			}
		})
	}
}

// An operation that failed without being applied is not resent when a
// later operation of the same record in the batch succeeded: it would land
// after it.
func TestBatchRetryKeepsARecordsOrder(t *testing.T) {
	st := &failingStore{Storage: memory.New(), code: domain.CodeUnavailable}
	var failures atomic.Int32
	st.fail = func(op ports.WriteOp) bool {
		// The first attempt of a "first" put fails; a resend would succeed.
		if strings.Contains(string(op.Document.Data), "first") && op.Address.Key.String() == domain.StringKey("k").String() {
			return failures.Add(1) == 1
		}
		return strings.Contains(string(op.Document.Data), "doomed")
	}
	c := sinktest.New(t, sinktest.WithStorage(st), sinktest.WithClientOptions(client.WithRetry(4, time.Millisecond, 5*time.Millisecond)))
	ds := c.Dataset("ns", "ds")
	b := c.Batch()
	b.Put(ds, client.StringKey("k"), map[string]string{"v": "first"})
	b.Put(ds, client.StringKey("k"), map[string]string{"v": "second"})
	b.Put(ds, client.StringKey("other"), map[string]string{"v": "doomed"})
	res := b.Do(context.Background())
	if !errors.Is(res[0].Err, client.ErrUnavailable) || res[1].Err != nil {
		t.Fatalf("results %v, %v: want the first put UNAVAILABLE and the second applied", res[0].Err, res[1].Err)
	}
	// The other record's put has no later operation: it is retried until
	// the attempts run out.
	var oe *client.OperationError
	if !errors.As(res[2].Err, &oe) || oe.Attempts != 4 {
		t.Fatalf("other record: %v, want 4 attempts", res[2].Err)
	}
	var v map[string]string
	if _, err := ds.Get(context.Background(), client.StringKey("k"), &v); err != nil || v["v"] != "second" {
		t.Fatalf("record k = %v, %v; want the second put", v, err)
	}
}

func TestTLSBearerTokenAndMutualTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "sink-test-ca")
	cert := ca.Server(t, "sink")
	dir := t.TempDir()
	const token = "s3cret-token-for-the-client-test"
	sum := sha256.Sum256([]byte(token))
	authFile := filepath.Join(dir, "auth.json")
	auth := fmt.Sprintf(`{"principals": [
		{"name": "orders", "token_hashes": ["sha256:%s"], "grants": [{"namespace": "shop", "rights": ["read", "write"]}]},
		{"name": "billing", "certificate_identities": ["dns:billing.internal"], "grants": [{"namespace": "billing", "rights": ["read", "write"]}]}
	]}`, hex.EncodeToString(sum[:]))
	if err := os.WriteFile(authFile, []byte(auth), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("token", func(t *testing.T) {
		srv := sinktest.Start(t, sinktest.WithEnv("SINK_TLS_CERT_FILE", cert.CertFile), sinktest.WithEnv("SINK_TLS_KEY_FILE", cert.KeyFile),
			sinktest.WithEnv("SINK_AUTH_TOKEN_FILE", authFile))
		newClient := func(opts ...client.Option) *client.Client {
			c, err := client.New(srv.Addr(), append([]client.Option{client.WithTLS(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12})}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
		c := newClient(client.WithBearerToken(token))
		if _, err := c.Dataset("shop", "orders").Put(ctx, client.StringKey("o"), map[string]int{"a": 1}); err != nil {
			t.Fatalf("Put with the token: %v", err)
		}
		_, err := c.Dataset("billing", "invoices").Put(ctx, client.StringKey("i"), map[string]int{"a": 1})
		if !errors.Is(err, client.ErrPermissionDenied) {
			t.Fatalf("Put outside the grants = %v, want ErrPermissionDenied", err)
		}
		_, err = newClient().Dataset("shop", "orders").Put(ctx, client.StringKey("o"), map[string]int{"a": 1})
		if !errors.Is(err, client.ErrUnauthenticated) {
			t.Fatalf("Put without a token = %v, want ErrUnauthenticated", err)
		}
	})
	t.Run("mtls", func(t *testing.T) {
		srv := sinktest.Start(t, sinktest.WithEnv("SINK_TLS_CERT_FILE", cert.CertFile), sinktest.WithEnv("SINK_TLS_KEY_FILE", cert.KeyFile),
			sinktest.WithEnv("SINK_TLS_CLIENT_CA_FILE", ca.CertFile), sinktest.WithEnv("SINK_AUTH_TOKEN_FILE", authFile))
		billing := ca.Client(t, "billing", "billing.internal")
		c, err := client.New(srv.Addr(), client.WithMTLS(billing.CertFile, billing.KeyFile, ca.CertFile))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Dataset("billing", "invoices").Put(ctx, client.StringKey("i"), map[string]int{"a": 1}); err != nil {
			t.Fatalf("Put with the client certificate: %v", err)
		}
		if _, err := client.New(srv.Addr(), client.WithMTLS(filepath.Join(dir, "missing.pem"), billing.KeyFile, "")); err == nil {
			t.Fatal("New with a missing certificate file succeeded")
		}
	})
}

// WithDNSRouting routes over every address of the name and picks up
// addresses that appear later.
func TestDNSRoutingReresolves(t *testing.T) {
	shared := memory.New()
	a := sinktest.Start(t, sinktest.WithStorage(shared), sinktest.WithEnv("SINK_GRPC_ADDRESS", "127.0.0.1:0"))
	_, port, err := net.SplitHostPort(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	b := sinktest.Start(t, sinktest.WithStorage(shared), sinktest.WithEnv("SINK_GRPC_ADDRESS", "127.0.0.2:"+port))
	var mu sync.Mutex
	ips := []string{"127.0.0.1"}
	lookups := make(chan struct{}, 100)
	lookup := func(_ context.Context, host string) ([]string, error) {
		if host != "sink.test" {
			return nil, fmt.Errorf("unexpected host %q", host)
		}
		mu.Lock()
		defer mu.Unlock()
		select {
		case lookups <- struct{}{}:
		default:
		}
		return slices.Clone(ips), nil
	}
	c, err := client.New("sink.test:"+port, client.WithInsecure(), client.WithDNSRouting(time.Second), client.WithLookup(lookup))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Servers(); !slices.Equal(got, []string{a.Addr()}) {
		t.Fatalf("servers %v, want [%s]", got, a.Addr())
	}
	mu.Lock()
	ips = []string{"127.0.0.2", "127.0.0.1"}
	mu.Unlock()
	<-lookups // New's
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Equal(c.Servers(), []string{a.Addr(), b.Addr()}) {
		if time.Now().After(deadline) {
			t.Fatalf("servers %v after 10 s, want both", c.Servers())
		}
		<-lookups
	}
	// Records spread over both and each is readable where it routes.
	ds := c.Dataset("ns", "dns")
	seen := map[string]bool{}
	for i := range 20 {
		k := client.Int64Key(int64(i))
		seen[c.ServerFor("", "ns", "dns", k)] = true
		if _, err := ds.Put(context.Background(), k, map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 2 {
		t.Fatalf("20 records routed to %v", seen)
	}
}

// A write that never left the client (no server listens) is resent even
// without a key; without call tracing the client cannot tell, and does not.
func TestUnsentWriteAndCallTracing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	for _, tc := range []struct {
		name     string
		opts     []client.Option
		want     error
		attempts int
	}{
		{"traced", nil, client.ErrUnavailable, 3},
		{"untraced", []client.Option{client.WithoutCallTracing()}, client.ErrOutcomeUnknown, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(addr, append([]client.Option{client.WithInsecure(), client.WithRetry(3, time.Millisecond, 5*time.Millisecond)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Dataset("ns", "ds").Put(context.Background(), client.StringKey("k"), map[string]int{"a": 1})
			var oe *client.OperationError
			if !errors.Is(err, tc.want) || !errors.As(err, &oe) || oe.Attempts != tc.attempts {
				t.Fatalf("Put = %v (%+v), want %v after %d attempts", err, oe, tc.want, tc.attempts)
			}
		})
	}
}

func TestReturnDocument(t *testing.T) {
	c := sinktest.New(t, sinktest.WithQueue())
	ctx := context.Background()
	for _, codec := range []client.Codec{client.JSON, client.BSON} {
		ds := c.Dataset("ns", "ret", client.WithCodec(codec))
		key := client.StringKey(codec.ContentType())
		res, err := ds.Put(ctx, key, order{Customer: "ada", Total: 1}, client.WithReturnDocument())
		var o order
		if err != nil || res.Decode(&o) != nil || o.Customer != "ada" || res.ContentType() != codec.ContentType() {
			t.Fatalf("%s put: %+v, %v, %+v", codec.ContentType(), res, err, o)
		}
		res, err = ds.Merge(ctx, key, "merge-patch", map[string]int{"total": 5}, client.WithReturnDocument())
		o = order{}
		if err != nil || res.Decode(&o) != nil || o != (order{Customer: "ada", Total: 5}) {
			t.Fatalf("%s merge: %+v, %v, %+v", codec.ContentType(), res, err, o)
		}
		// Without the option there is no document.
		res, err = ds.Merge(ctx, key, "merge-patch", map[string]int{"total": 6})
		if err != nil || !errors.Is(res.Decode(&o), client.ErrNotFound) {
			t.Fatalf("%s merge without the option: %v, decode %v", codec.ContentType(), err, res.Decode(&o))
		}
	}
	_, err := c.Dataset("ns", "ret").Put(ctx, client.StringKey("k"), order{}, client.WithReturnDocument(), client.WithCompletion(client.ReturnAfterAccepted))
	if !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("return document with RETURN_AFTER_ACCEPTED = %v, want ErrInvalidArgument", err)
	}
}

// With WithWholeBatches a batch over records of both servers goes whole,
// in one request, to the server of its first record; single operations
// keep their affinity.
func TestWholeBatchesGoToOneServer(t *testing.T) {
	shared := memory.New()
	a := sinktest.Start(t, sinktest.WithStorage(shared))
	b := sinktest.Start(t, sinktest.WithStorage(shared))
	rec := &recorder{}
	c := a.NewClient(t, client.WithServers(a.Addr(), b.Addr()), client.WithWholeBatches(), client.WithDialOptions(grpc.WithUnaryInterceptor(rec.intercept)))
	ds := c.Dataset("shop", "counters")
	ctx := context.Background()
	keys := make([]client.Key, 40)
	servers := map[string]bool{}
	for i := range keys {
		keys[i] = client.StringKey(fmt.Sprintf("r%d", i))
		servers[c.ServerFor("", "shop", "counters", keys[i])] = true
	}
	if len(servers) != 2 {
		t.Fatalf("the records route to %d servers, want both", len(servers))
	}
	bt := c.Batch().SetCompletion(client.WaitUntilApplied)
	for _, k := range keys {
		bt.Put(ds, k, map[string]int{"n": 1})
	}
	for i, r := range bt.Do(ctx) {
		if r.Err != nil {
			t.Fatalf("put %d: %v", i, r.Err)
		}
	}
	reqs := rec.all()
	if len(reqs) != 1 || reqs[0].ops != len(keys) || reqs[0].target != c.ServerFor("", "shop", "counters", keys[0]) {
		t.Fatalf("the batch went out as %+v, want one request of %d operations to %s", reqs, len(keys), c.ServerFor("", "shop", "counters", keys[0]))
	}
	// A single operation still goes to its record's server.
	for _, k := range keys[1:] {
		if c.ServerFor("", "shop", "counters", k) == reqs[0].target {
			continue
		}
		var v map[string]int
		if _, err := ds.Get(ctx, k, &v); err != nil || v["n"] != 1 {
			t.Fatalf("Get = %v, %v", v, err)
		}
		if last := rec.all()[len(rec.all())-1]; last.target == reqs[0].target {
			t.Fatalf("a single read of a record of the other server went to %s", last.target)
		}
		return
	}
}
