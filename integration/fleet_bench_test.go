package integration_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/sink-io/sink/adapters/mergepatch"
	"github.com/sink-io/sink/client"
	"github.com/sink-io/sink/internal/testkit/mongotest"
)

// BenchmarkFleetHotKeyMongo: a fleet of two Sink servers on one
// MongoDB-wire test server, 16 clients merging one record (merge-patch),
// routed round-robin (merge i to server i%2, as a load balancer would) or
// by key affinity (client.WithServers: the record's merges all go to the
// server its rendezvous hash picks, where they fold). It reports merges/s,
// conflicting conditional writes per merge (summed over both servers),
// ABORTED merges and the p99 latency. The client does not retry
// (WithRetry(1)), so that what routing costs is not hidden by retries.
func BenchmarkFleetHotKeyMongo(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a MongoDB-wire server; skipped with -short")
	}
	const clients = 16
	srv := mongotest.Shared(b)
	s1, d1 := startDelayed(b, 0, srv.SinkEnv())
	s2, d2 := startDelayed(b, 0, srv.SinkEnv())
	newClient := func(b *testing.B, target string, opts ...client.Option) *client.Client {
		c, err := client.New(target, append([]client.Option{client.WithInsecure(), client.WithRetry(1, 0, 0)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	ns := mongotest.DatabaseName(b)
	for _, mode := range []string{"round-robin", "affinity"} {
		b.Run(mode, func(b *testing.B) {
			var pick func(i int) *client.Dataset
			ds := func(c *client.Client) *client.Dataset { return c.Dataset(ns, "fleet-"+mode) }
			if mode == "affinity" {
				a := ds(newClient(b, "fleet", client.WithServers(s1.Addr, s2.Addr)))
				pick = func(int) *client.Dataset { return a }
			} else {
				both := []*client.Dataset{ds(newClient(b, s1.Addr)), ds(newClient(b, s2.Addr))}
				pick = func(i int) *client.Dataset { return both[i%2] }
			}
			key := client.StringKey("hot")
			before := d1.Stats().Conflicts + d2.Stats().Conflicts
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
			conflicts := d1.Stats().Conflicts + d2.Stats().Conflicts - before
			b.ReportMetric(r.rate(), "merges/s")
			b.ReportMetric(float64(conflicts)/float64(n), "conflicts/merge")
			b.ReportMetric(float64(r.aborted), "aborted")
			b.ReportMetric(float64(percentile(r.lat, 0.99).Microseconds()), "p99-µs")
		})
	}
}
