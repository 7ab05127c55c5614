package integration_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sink-io/sink/adapters/mergepatch"
	"github.com/sink-io/sink/client"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/internal/testkit/pgtest"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	"github.com/sink-io/sink/ports/storagetest"
)

// BenchmarkFleetHotKeyMongo: a fleet of two Sink servers on one
// MongoDB-wire test server, 16 clients merging one record (merge-patch),
// routed round-robin (merge i to server i%2, as a load balancer would) or
// by key affinity (client.WithServers: the record's merges all go to the
// server its rendezvous hash picks, where they fold). It reports merges/s,
// conflicting conditional writes per merge (summed over both servers),
// ABORTED merges, the p99 latency, the storage calls per merge (both
// servers) and the CPU time per merge of this process (clients and both
// servers; not the database's). The client does not retry
// (WithRetry(1)), so that what routing costs is not hidden by retries.
func BenchmarkFleetHotKeyMongo(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a MongoDB-wire server; skipped with -short")
	}
	srv := mongotest.Shared(b)
	fleetHotKey(b, srv.SinkEnv, mongotest.DatabaseName(b))
}

// BenchmarkFleetHotKeyPostgres is BenchmarkFleetHotKeyMongo with both
// servers on one PostgreSQL database (no write gate: the servers'
// conditional writes run concurrently).
func BenchmarkFleetHotKeyPostgres(b *testing.B) {
	url := pgtest.Shared(b).NewDatabase(b)
	fleetHotKey(b, func() map[string]string { return map[string]string{"SINK_POSTGRES_URL": url} }, "fleet")
}

// fleet is two Sink servers on one database.
type fleet struct {
	s1, s2 *sinktest.Server
	d1, d2 *storagetest.Delayed
}

func startFleet(b *testing.B, env func() map[string]string) fleet {
	var f fleet
	f.s1, f.d1 = startDelayed(b, 0, env())
	f.s2, f.d2 = startDelayed(b, 0, env())
	return f
}

func (f fleet) conflicts() int64 { return f.d1.Stats().Conflicts + f.d2.Stats().Conflicts }

func (f fleet) calls() int64 { return f.d1.Stats().Calls() + f.d2.Stats().Calls() }

func fleetClient(b *testing.B, target string, opts ...client.Option) *client.Client {
	c, err := client.New(target, append([]client.Option{client.WithInsecure(), client.WithRetry(1, 0, 0)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func fleetHotKey(b *testing.B, env func() map[string]string, ns string) {
	const clients = 16
	f := startFleet(b, env)
	for _, mode := range []string{"round-robin", "affinity"} {
		b.Run(mode, func(b *testing.B) {
			var pick func(i int) *client.Dataset
			ds := func(c *client.Client) *client.Dataset { return c.Dataset(ns, "fleet-"+mode) }
			if mode == "affinity" {
				a := ds(fleetClient(b, "fleet", client.WithServers(f.s1.Addr, f.s2.Addr)))
				pick = func(int) *client.Dataset { return a }
			} else {
				both := []*client.Dataset{ds(fleetClient(b, f.s1.Addr)), ds(fleetClient(b, f.s2.Addr))}
				pick = func(i int) *client.Dataset { return both[i%2] }
			}
			key := client.StringKey("hot")
			before, callsBefore, cpuBefore := f.conflicts(), f.calls(), selfCPU()
			n := max(b.N, clients)
			b.ResetTimer()
			r := runLoad(b, clients, n, func(i int) (codes.Code, error) {
				_, err := pick(i).Merge(context.Background(), key, mergepatch.Name, map[string]int{fmt.Sprintf("c%d", i%clients): i})
				switch {
				case err == nil:
					return codes.OK, nil
				case errors.Is(err, client.ErrAborted):
					return codes.Aborted, nil
				}
				return codes.Unknown, err
			})
			b.StopTimer()
			b.ReportMetric(r.rate(), "merges/s")
			b.ReportMetric(float64(f.conflicts()-before)/float64(n), "conflicts/merge")
			b.ReportMetric(float64(f.calls()-callsBefore)/float64(n), "storage-calls/merge")
			b.ReportMetric(float64((selfCPU()-cpuBefore).Microseconds())/float64(n), "cpu-µs/merge")
			b.ReportMetric(float64(r.aborted), "aborted")
			b.ReportMetric(float64(percentile(r.lat, 0.99).Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkFleetBatchMongo: one client over a fleet of two servers sends
// batches of 50 puts of 1 KB (to distinct records) and batches of 50
// reads of them (500 on PostgreSQL; the test FerretDB scans its table for
// each write), split per server (each server gets the records key
// affinity gives it, both requests at once) or whole to one server
// (client.WithWholeBatches), alternately in one loop. It reports each
// way's p50 and p99 and split ÷ whole of the p50s: the measurement behind
// the client's default (docs/client.md).
func BenchmarkFleetBatchMongo(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a MongoDB-wire server; skipped with -short")
	}
	srv := mongotest.Shared(b)
	fleetBatch(b, srv.SinkEnv, mongotest.DatabaseName(b), client.BSON, 50)
}

// BenchmarkFleetBatchPostgres is BenchmarkFleetBatchMongo on PostgreSQL,
// with batches of 500.
func BenchmarkFleetBatchPostgres(b *testing.B) {
	url := pgtest.Shared(b).NewDatabase(b)
	fleetBatch(b, func() map[string]string { return map[string]string{"SINK_POSTGRES_URL": url} }, "fleet", client.JSON, 500)
}

func fleetBatch(b *testing.B, env func() map[string]string, ns string, codec client.Codec, size int) {
	f := startFleet(b, env)
	split := fleetClient(b, "fleet", client.WithServers(f.s1.Addr, f.s2.Addr))
	whole := fleetClient(b, "fleet", client.WithServers(f.s1.Addr, f.s2.Addr), client.WithWholeBatches())
	doc := map[string]string{"p": string(make([]byte, 1000))}
	keys := make([]client.Key, size)
	for i := range keys {
		keys[i] = client.StringKey(fmt.Sprintf("key-%06d", i))
	}
	ctx := context.Background()
	do := func(b *testing.B, c *client.Client, read bool) {
		d := c.Dataset(ns, "batch", client.WithCodec(codec))
		bt := c.Batch()
		for _, k := range keys {
			if read {
				bt.Read(d, k)
			} else {
				bt.Put(d, k, doc)
			}
		}
		for i, r := range bt.Do(ctx) {
			if r.Err != nil {
				b.Fatalf("operation %d: %v", i, r.Err)
			}
		}
	}
	do(b, split, false) // the records exist for the reads
	for _, op := range []string{"put", "read"} {
		b.Run(op, func(b *testing.B) {
			read := op == "read"
			var ts, tw []time.Duration
			n := 0
			for b.Loop() {
				for x := range 2 {
					c, into := split, &ts
					if (n+x)%2 == 1 {
						c, into = whole, &tw
					}
					t0 := time.Now()
					do(b, c, read)
					*into = append(*into, time.Since(t0))
				}
				n++
			}
			p50s, p50w := percentile(ts, 0.5), percentile(tw, 0.5)
			b.ReportMetric(float64(p50s.Microseconds()), "split-p50-µs")
			b.ReportMetric(float64(p50w.Microseconds()), "whole-p50-µs")
			b.ReportMetric(float64(percentile(ts, 0.99).Microseconds()), "split-p99-µs")
			b.ReportMetric(float64(percentile(tw, 0.99).Microseconds()), "whole-p99-µs")
			b.ReportMetric(float64(p50s)/float64(p50w), "split/whole-p50")
		})
	}
}
