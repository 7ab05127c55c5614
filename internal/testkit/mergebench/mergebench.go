// Package mergebench is the merge-contention benchmark the storage
// adapters share: 16 clients merging into one record (a hot key) or into a
// few records through the application, with the counting profile, so that
// each adapter's figures measure the same work.
package mergebench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/countprofile"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
)

// Run merges b.N counting intents from 16 clients (8 per processor on 2)
// into keys records of namespace/dataset of st, through an application
// service with the default configuration (folding and natural batching on),
// checks by reading the records back that every applied merge was counted
// once, and reports merges/s, conflicts/merge (storage conflicts, counted
// by a storagetest.Delayed wrapper), aborted (merges that ran out of
// attempts) and the p50 and p99 latency of one merge (p50-ms, p99-ms).
// contentType is the documents' type.
func Run(b *testing.B, st ports.Storage, namespace, dataset string, keys int, contentType string) {
	b.Helper()
	d := storagetest.NewDelayed(st, 0)
	cfg := application.DefaultConfig()
	svc, err := application.NewService(cfg, d, []ports.MergeProfile{countprofile.New()})
	if err != nil {
		b.Fatal(err)
	}
	intent, err := countprofile.Encode(contentType, countprofile.Intent{Add: 1})
	if err != nil {
		b.Fatal(err)
	}
	addr := func(k int64) domain.Address {
		return domain.Address{Store: cfg.Store, Namespace: namespace, Dataset: dataset, Key: domain.Int64Key(k)}
	}
	ctx := context.Background()
	var next, aborted atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(8) // 16 clients on 2 processors
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		defer func() {
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
		for pb.Next() {
			start := time.Now()
			res, err := svc.Write(ctx, []domain.Mutation{{Kind: domain.MutationMerge, Address: addr(next.Add(1) % int64(keys)), Merge: domain.MergeIntent{Profile: countprofile.Name, Intent: intent}}}, application.WaitUntilApplied)
			mine = append(mine, time.Since(start))
			if err != nil {
				b.Error(err)
				return
			}
			if res[0].Status != application.StatusApplied {
				if domain.CodeOf(res[0].Err) == domain.CodeAborted {
					aborted.Add(1)
					continue
				}
				b.Errorf("merge: %+v", res[0])
				return
			}
		}
	})
	b.StopTimer()
	addrs := make([]domain.Address, keys)
	for k := range addrs {
		addrs[k] = addr(int64(k))
	}
	var total int64
	for i, r := range st.Read(ctx, addrs) {
		if r.Err != nil {
			b.Fatalf("read back record %d: %v", i, r.Err)
		}
		if !r.Found {
			continue
		}
		var c countprofile.Counter
		if err := countprofile.Decode(r.Record.Document, &c); err != nil {
			b.Fatalf("record %d: %v", i, err)
		}
		total += int64(c.N)
	}
	if applied := int64(b.N) - aborted.Load(); total != applied {
		b.Fatalf("the records count %d merges, %d were applied", total, applied)
	}
	slices.Sort(lat)
	at := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "merges/s")
	b.ReportMetric(float64(d.Stats().Conflicts)/float64(b.N), "conflicts/merge")
	b.ReportMetric(float64(aborted.Load()), "aborted")
	b.ReportMetric(float64(at(0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(at(0.99).Microseconds())/1000, "p99-ms")
}

// Name is the sub-benchmark name of a run over keys records.
func Name(keys int) string { return fmt.Sprintf("keys=%d", keys) }
