package integration_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/fx"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sink-io/sink/adapters/mergepatch"
	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/countprofile"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/internal/testkit/nullsink"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// Contention benchmarks: every case runs against Sink and, in the same run,
// against a null gRPC server (internal/testkit/nullsink) that decodes the
// same requests and answers without doing any work, so that each Sink
// number comes with its ratio to the gRPC floor ("vs-null"). The 1 ms
// cases wrap the memory storage in storagetest.Delayed, which adds a
// simulated 1 ms round trip to every storage call and counts the calls.

// startNull starts the null server (internal/testkit/nullsink) on a
// loopback port and returns a client.
func startNull(b testing.TB) sinkv1.SinkClient {
	b.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := nullsink.Serve(lis)
	b.Cleanup(srv.Stop)
	return dialSink(b, lis.Addr().String())
}

// startDelayed starts Sink on memory storage wrapped in a Delayed storage
// with the given round trip (0: only counting), on top of env. With
// SINK_BENCH_NO_HINTS=1 in the environment the application keeps no
// last-written-state hints (see noReadBack), for before/after comparisons.
func startDelayed(b testing.TB, rtt time.Duration, env map[string]string) (*sinktest.Server, *storagetest.Delayed) {
	b.Helper()
	if os.Getenv("SINK_BENCH_NO_HINTS") == "1" {
		return startDelayedWith(b, rtt, env, func(d *storagetest.Delayed) ports.Storage { return noReadBack{d} })
	}
	return startDelayedWith(b, rtt, env, func(d *storagetest.Delayed) ports.Storage { return d })
}

// noReadBack hides the storage's read-back guarantee from the application
// (it says a read may return something other than what was written), so
// that every fold of merges reads its record: the hot-key case without the
// last-written-state hints.
type noReadBack struct{ ports.Storage }

func (noReadBack) ReadsBackWrites() bool { return false }

// startDelayedWith is startDelayed with the Delayed storage passed through
// wrap before the application gets it.
func startDelayedWith(b testing.TB, rtt time.Duration, env map[string]string, wrap func(*storagetest.Delayed) ports.Storage, opts ...fx.Option) (*sinktest.Server, *storagetest.Delayed) {
	b.Helper()
	var d *storagetest.Delayed
	if env == nil {
		env = map[string]string{}
	}
	env["SINK_LOG_LEVEL"] = "error"
	for _, kv := range strings.Fields(os.Getenv("SINK_BENCH_ENV")) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	s := sinktest.Start(b, env, append(opts, fx.Decorate(func(st ports.Storage) ports.Storage {
		d = storagetest.NewDelayed(st, rtt)
		return wrap(d)
	}))...)
	if d == nil {
		b.Fatal("the storage was not decorated")
	}
	return s, d
}

// loadResult is what one concurrent run measured.
type loadResult struct {
	ops     int
	elapsed time.Duration
	aborted int64
	lat     []time.Duration
}

func (r loadResult) rate() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// runLoad sends n operations from clients goroutines; op(i) sends operation
// i and returns its gRPC code (codes.OK when the operation was applied,
// codes.Aborted when it was, other codes fail the benchmark).
func runLoad(b *testing.B, clients, n int, op func(i int) (codes.Code, error)) loadResult {
	b.Helper()
	var next, aborted atomic.Int64
	var mu sync.Mutex
	var failure error
	lat := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t := time.Now()
				code, err := op(i)
				lat[c] = append(lat[c], time.Since(t))
				switch {
				case err != nil:
					mu.Lock()
					failure = err
					mu.Unlock()
					return
				case code == codes.Aborted:
					aborted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	r := loadResult{ops: n, elapsed: time.Since(start), aborted: aborted.Load()}
	if failure != nil {
		b.Fatal(failure)
	}
	for _, l := range lat {
		r.lat = append(r.lat, l...)
	}
	return r
}

// writeCode sends one Write and returns the code of its single result.
func writeCode(c sinkv1.SinkClient, op *sinkv1.WriteOperation) (codes.Code, error) {
	resp, err := c.Write(context.Background(), &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{op}})
	if err != nil {
		return codes.Unknown, err
	}
	r := resp.GetResults()[0]
	switch {
	case r.GetStatus() == applied:
		return codes.OK, nil
	case r.GetError().GetCode() == uint32(codes.Aborted):
		return codes.Aborted, nil
	default:
		return codes.Unknown, fmt.Errorf("write: %v %v", r.GetStatus(), r.GetError())
	}
}

func percentile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1))]
}

// BenchmarkContentionHotKey: 16 concurrent clients send single merge-patch
// merges to one record; the storage has a simulated 1 ms round trip. It
// reports merges/s, the ABORTED results, the conflicting conditional writes
// per merge and the storage calls per merge, and the same load against the
// null server.
//
// A fold of the hot record starts from the state the previous fold wrote
// (the application's last-written-state hint) instead of reading it, so a
// fold costs one conditional write: about one storage call per 8 merges.
func BenchmarkContentionHotKey(b *testing.B) {
	benchHotKey(b, func(d *storagetest.Delayed) ports.Storage { return d })
}

// BenchmarkContentionHotKeyNoHints: the hot-key case with a storage that
// does not promise to read back what it was given, so that the application
// keeps no hints and every fold reads its record (a read and a write per
// fold): the comparison for BenchmarkContentionHotKey.
func BenchmarkContentionHotKeyNoHints(b *testing.B) {
	benchHotKey(b, func(d *storagetest.Delayed) ports.Storage { return noReadBack{d} })
}

func benchHotKey(b *testing.B, wrap func(*storagetest.Delayed) ports.Storage) {
	const clients = 16
	s, d := startDelayedWith(b, time.Millisecond, nil, wrap)
	null := startNull(b)
	a := addr("bench", "hot", "k")
	op := func(i int) *sinkv1.WriteOperation {
		return mergeOp(a, mergepatch.Name, fmt.Sprintf(`{"c%d":%d}`, i%clients, i))
	}
	n := max(b.N, clients)
	b.ResetTimer()
	before := d.Stats()
	sink := runLoad(b, clients, n, func(i int) (codes.Code, error) { return writeCode(s.Client, op(i)) })
	after := d.Stats()
	floor := runLoad(b, clients, n, func(i int) (codes.Code, error) { return writeCode(null, op(i)) })
	b.StopTimer()
	b.ReportMetric(sink.rate(), "merges/s")
	b.ReportMetric(float64(sink.aborted), "aborted")
	b.ReportMetric(float64(after.Conflicts-before.Conflicts)/float64(n), "conflicts/merge")
	b.ReportMetric(float64(after.Calls()-before.Calls())/float64(n), "calls/merge")
	b.ReportMetric(float64(percentile(sink.lat, 0.99).Microseconds()), "p99-µs")
	b.ReportMetric(sink.rate()/floor.rate(), "vs-null")
}

// BenchmarkContentionDistinctPuts: 64 concurrent clients send single puts
// to distinct records; the storage has a simulated 1 ms round trip. It
// reports puts/s and storage calls per put, and the ratio to the same load
// against the null server.
func BenchmarkContentionDistinctPuts(b *testing.B) {
	const clients = 64
	s, d := startDelayed(b, time.Millisecond, nil)
	null := startNull(b)
	doc := `{"payload":"` + strings.Repeat("x", 100) + `"}`
	op := func(i int) *sinkv1.WriteOperation {
		return putOp(addr("bench", "distinct", fmt.Sprint(i)), doc, 0, nil)
	}
	n := max(b.N, clients)
	b.ResetTimer()
	before := d.Stats()
	sink := runLoad(b, clients, n, func(i int) (codes.Code, error) { return writeCode(s.Client, op(i)) })
	after := d.Stats()
	floor := runLoad(b, clients, n, func(i int) (codes.Code, error) { return writeCode(null, op(i)) })
	b.StopTimer()
	if sink.aborted > 0 {
		b.Fatalf("%d puts aborted", sink.aborted)
	}
	b.ReportMetric(sink.rate(), "puts/s")
	b.ReportMetric(float64(after.Calls()-before.Calls())/float64(n), "calls/put")
	b.ReportMetric(float64(percentile(sink.lat, 0.5).Microseconds()), "p50-µs")
	b.ReportMetric(sink.rate()/floor.rate(), "vs-null")
}

// BenchmarkSingleOp: one client, no load, memory storage without delay:
// p50 latency of a single put, merge and read, against Sink and the null
// server alternately (so that both see the same machine state), and their
// ratio as throughput (null p50 / Sink p50, 1 = the gRPC floor).
func BenchmarkSingleOp(b *testing.B) {
	s, _ := startDelayed(b, 0, nil)
	singleOps(b, opClient{SinkClient: s.Client}, opClient{SinkClient: startNull(b)})
}

// singleOps runs the single-operation cases against sink and null, each
// after warmUp calls of it to both (not timed).
func singleOps(b *testing.B, sink, null opClient) {
	for _, c := range singleOpCases() {
		b.Run(c.name, func(b *testing.B) {
			warmUp(b, c, sink, null)
			sinkLat := make([]time.Duration, 0, b.N)
			nullLat := make([]time.Duration, 0, b.N)
			for i := 0; b.Loop(); i++ {
				t := time.Now()
				if err := c.call(sink, i); err != nil {
					b.Fatal(err)
				}
				sinkLat = append(sinkLat, time.Since(t))
				t = time.Now()
				if err := c.call(null, i); err != nil {
					b.Fatal(err)
				}
				nullLat = append(nullLat, time.Since(t))
			}
			sp, np := percentile(sinkLat, 0.5), percentile(nullLat, 0.5)
			b.ReportMetric(float64(sp.Microseconds()), "p50-µs")
			b.ReportMetric(float64(np.Microseconds()), "null-p50-µs")
			b.ReportMetric(float64(np)/float64(sp), "vs-null")
		})
	}
}

// BenchmarkContentionHotKeyMongo: the hot-key case on the MongoDB-wire test
// server (16 clients, single merges to one record, no simulated delay). It
// reports merges/s, ABORTED results and conflicting conditional writes per
// merge.
func BenchmarkContentionHotKeyMongo(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a MongoDB-wire server; skipped with -short")
	}
	const clients = 16
	srv := mongotest.Shared(b)
	s, d := startDelayed(b, 0, srv.SinkEnv())
	a := addr(mongotest.DatabaseName(b), "hot", "k")
	n := max(b.N, clients)
	b.ResetTimer()
	r := runLoad(b, clients, n, func(i int) (codes.Code, error) {
		return writeCode(s.Client, mergeOp(a, mergepatch.Name, fmt.Sprintf(`{"c%d":%d}`, i%clients, i)))
	})
	b.StopTimer()
	st := d.Stats()
	b.ReportMetric(r.rate(), "merges/s")
	b.ReportMetric(float64(r.aborted), "aborted")
	b.ReportMetric(float64(st.Conflicts)/float64(n), "conflicts/merge")
	b.ReportMetric(float64(percentile(r.lat, 0.99).Microseconds()), "p99-µs")
}

// BenchmarkContentionDistinctPutsMongo: the distinct-records case on the
// MongoDB-wire test server (64 clients, single puts, no simulated delay):
// puts/s and storage calls per put.
func BenchmarkContentionDistinctPutsMongo(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a MongoDB-wire server; skipped with -short")
	}
	const clients = 64
	srv := mongotest.Shared(b)
	s, d := startDelayed(b, 0, srv.SinkEnv())
	ns := mongotest.DatabaseName(b)
	doc := bson.D{{Key: "payload", Value: strings.Repeat("x", 100)}}
	n := max(b.N, clients)
	b.ResetTimer()
	r := runLoad(b, clients, n, func(i int) (codes.Code, error) {
		return writeCode(s.Client, opsBSONPut(b, addr(ns, "distinct", fmt.Sprint(i)), doc))
	})
	b.StopTimer()
	b.ReportMetric(r.rate(), "puts/s")
	b.ReportMetric(float64(d.Stats().Calls())/float64(n), "calls/put")
	b.ReportMetric(float64(percentile(r.lat, 0.5).Microseconds()), "p50-µs")
}

// TestHotKeyMergesCountExactlyMongo: 16 clients merge one record
// concurrently on the MongoDB-wire test server with a counting profile
// whose merges are not idempotent. Folds of the record start from the
// state Sink wrote last (its hint) instead of reading it, so this checks
// that MongoDB reads back what Sink wrote: every merge is applied exactly
// once, each client's merges in its order, none ABORTED.
func TestHotKeyMergesCountExactlyMongo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a MongoDB-wire server; skipped with -short")
	}
	const clients, per = 16, 30
	srv := mongotest.Shared(t)
	s, d := startDelayedWith(t, 0, srv.SinkEnv(), func(d *storagetest.Delayed) ports.Storage { return d }, bootstrap.MergeProfile(countprofile.New))
	a := addr(mongotest.DatabaseName(t), "hot", "count")
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				in, err := countprofile.Encode(domain.ContentTypeBSON, countprofile.Intent{Add: 1, ID: fmt.Sprintf("%d-%d", c, i)})
				if err != nil {
					t.Error(err)
					return
				}
				op := &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{
					Address: a, Profile: countprofile.Name, Intent: &sinkv1.Document{ContentType: in.ContentType, Data: in.Data}}}}
				if code, err := writeCode(s.Client, op); err != nil || code != codes.OK {
					t.Errorf("merge %d-%d: %v %v", c, i, code, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	r := read(t, s.Client, a)[0]
	var got countprofile.Counter
	if err := countprofile.Decode(domain.Document{ContentType: r.GetDocument().GetContentType(), Data: r.GetDocument().GetData()}, &got); err != nil {
		t.Fatal(err)
	}
	if got.N != clients*per || len(got.IDs) != clients*per {
		t.Fatalf("counter n=%d with %d ids, want %d: merges lost or doubled", got.N, len(got.IDs), clients*per)
	}
	next := make([]int, clients)
	for _, id := range got.IDs {
		var c, i int
		if _, err := fmt.Sscanf(id, "%d-%d", &c, &i); err != nil || c < 0 || c >= clients || i != next[c] {
			t.Fatalf("id %q out of order (client %d expected its merge %d next)", id, c, next[max(0, min(c, clients-1))])
		}
		next[c]++
	}
	st := d.Stats()
	t.Logf("storage: %+v for %d merges", st, clients*per)
	if st.Reads >= st.Writes {
		t.Fatalf("storage %+v: folds read the record as often as they wrote it; they should start from Sink's own last write", st)
	}
}

// singleOpCase is one single-operation case: call sends request i (on
// one of 1000 records) to a server; a request carries ops operations.
// prepare, when set, writes what the case reads (warmUp calls it first),
// so that a read case reads found records whether or not the case that
// writes them ran before it (-bench may select it alone).
type singleOpCase struct {
	name    string
	call    func(c opClient, i int) error
	ops     int
	prepare func(c opClient) error
}

// opClient is a client of a benchmarked server: its Sink API and its
// health service (nil when no case needs it).
type opClient struct {
	sinkv1.SinkClient
	health healthpb.HealthClient
}

// warmUpCalls is how many calls of a case each server gets before it is
// measured: a fresh server grows its heap, its stream workers' stacks and
// (Sink) its records and hint tables during its first calls, and the first
// case measured would otherwise pay for that alone.
const warmUpCalls = 2000

// warmUp makes warmUpCalls calls of c to each server, alternately (as
// many operations, at least 20 calls, for batches).
func warmUp(b *testing.B, c singleOpCase, servers ...opClient) {
	b.Helper()
	for _, srv := range servers {
		if c.prepare == nil {
			break
		}
		if err := c.prepare(srv); err != nil {
			b.Fatalf("preparing %s: %v", c.name, err)
		}
	}
	for i := range max(warmUpCalls/c.ops, 20) {
		for _, srv := range servers {
			if err := c.call(srv, i); err != nil {
				b.Fatalf("warming up %s: %v", c.name, err)
			}
		}
	}
}

// singleOpCases are the single put (a 1 KB document), merge and read.
func singleOpCases() []singleOpCase {
	doc := `{"payload":"` + strings.Repeat("x", 1000) + `"}`
	ctx := context.Background()
	return []singleOpCase{
		{"put", func(c opClient, i int) error {
			_, err := writeCode(c, putOp(addr("bench", "single", fmt.Sprint(i%1000)), doc, 0, nil))
			return err
		}, 1, nil},
		{"merge", func(c opClient, i int) error {
			_, err := writeCode(c, mergeOp(addr("bench", "single-merge", fmt.Sprint(i%1000)), mergepatch.Name, fmt.Sprintf(`{"n":%d}`, i)))
			return err
		}, 1, nil},
		{"read", func(c opClient, i int) error {
			resp, err := c.Read(ctx, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: addr("bench", "single", fmt.Sprint(i%1000))}}})
			if err == nil && resp.GetResults()[0].GetError() != nil {
				err = fmt.Errorf("read: %v", resp.GetResults()[0].GetError())
			}
			return err
		}, 1, func(c opClient) error { // the put case's records
			for i := range 1000 {
				if _, err := writeCode(c, putOp(addr("bench", "single", fmt.Sprint(i)), doc, 0, nil)); err != nil {
					return err
				}
			}
			return nil
		}},
	}
}
