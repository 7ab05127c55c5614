package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/mergepatch"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// 5,000 async puts, merges and deletes over 100 records from 8 concurrent
// clients, each owning a disjoint set of records and sending its requests
// one after the other (the next one only once the previous was accepted).
// Every record's final state must equal applying its mutations
// sequentially in submission order. Every operation writes its own sequence
// number ("seq"/"last"), so any reordering of a record's mutations changes
// its final state.
func TestAsyncOrderPerRecord(t *testing.T) {
	asyncSkipShort(t)
	forEachTransport(t, 4, func(t *testing.T, tr *asyncTransport) {
		testAsyncOrderPerRecord(t, tr.startAll(t, map[string]string{"SINK_KAFKA_MAX_POLL_RECORDS": "500"}).Client)
	})
}

func testAsyncOrderPerRecord(t *testing.T, c sinkv1.SinkClient) {
	const (
		clients   = 8
		records   = 100
		mutations = 5000
	)

	addrOf := func(r int) *sinkv1.RecordAddress { return addr("order", "records", fmt.Sprintf("r%03d", r)) }
	// expected[r] is the model state: "absent" or the JSON document.
	expected := make([]string, records)
	for r := range expected {
		expected[r] = "absent"
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	start := time.Now()
	var totalRequests int
	for cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(42, uint64(cl)))
			var own []int
			for r := cl; r < records; r += clients {
				own = append(own, r)
			}
			model := map[int][]byte{} // nil: absent
			n := mutations / clients
			requests := 0
			for seq := 0; seq < n; {
				size := 1 + rng.IntN(40)
				if seq+size > n {
					size = n - seq
				}
				var ops []*sinkv1.WriteOperation
				var dels []*sinkv1.DeleteOperation
				kindDelete := rng.IntN(8) == 0 // a delete request, or a write request
				for range size {
					r := own[rng.IntN(len(own))]
					tag := fmt.Sprintf("c%d-%d", cl, seq)
					if kindDelete {
						dels = append(dels, &sinkv1.DeleteOperation{Address: addrOf(r)})
						model[r] = nil
					} else if rng.IntN(3) == 0 {
						doc := fmt.Sprintf(`{"seq":%q,"put":%d}`, tag, seq)
						ops = append(ops, putOp(addrOf(r), doc, sinkv1.PutMode_PUT_MODE_UPSERT, nil))
						model[r] = []byte(doc)
					} else {
						patch := fmt.Sprintf(`{"last":%q,"f%d":%d,"seq":null}`, tag, seq%4, seq)
						ops = append(ops, mergeOp(addrOf(r), mergepatch.Name, patch))
						merged, err := mergepatch.MergeJSON(model[r], []byte(patch))
						if err != nil {
							errs <- err
							return
						}
						model[r] = merged
					}
					seq++
				}
				var results []resultWithID
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if kindDelete {
					resp, err := c.Delete(ctx, &sinkv1.DeleteRequest{Operations: dels, Completion: returnAccepted})
					if err != nil {
						cancel()
						errs <- fmt.Errorf("client %d: Delete: %w", cl, err)
						return
					}
					for _, r := range resp.GetResults() {
						results = append(results, r)
					}
				} else {
					resp, err := asyncWrite(ctx, c, ops...)
					if err != nil {
						cancel()
						errs <- fmt.Errorf("client %d: Write: %w", cl, err)
						return
					}
					for _, r := range resp.GetResults() {
						results = append(results, r)
					}
				}
				cancel()
				for i, r := range results {
					if r.GetStatus() != accepted {
						errs <- fmt.Errorf("client %d: operation %d: %v %v", cl, i, r.GetStatus(), r.GetError())
						return
					}
				}
				requests++
			}
			mu.Lock()
			totalRequests += requests
			for r, doc := range model {
				if doc == nil {
					expected[r] = "absent"
				} else {
					expected[r] = normJSON(doc)
				}
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	accepted := time.Since(start)

	deleted := 0
	for _, e := range expected {
		if e == "absent" {
			deleted++
		}
	}
	if deleted == 0 || deleted == records {
		t.Fatalf("%d of %d records end deleted: the workload does not exercise both outcomes", deleted, records)
	}
	eventually(t, 60*time.Second, "every record to reach its sequential state", func() (bool, string) {
		for r := range records {
			got, err := readState(context.Background(), c, addrOf(r))
			if err != nil {
				return false, err.Error()
			}
			if got != expected[r] && !jsonEqual(got, expected[r]) {
				return false, fmt.Sprintf("record %d is %s, want %s", r, got, expected[r])
			}
		}
		return true, ""
	})
	t.Logf("%d mutations in %d requests from %d clients accepted in %v, all applied in order after %v (%d records end deleted)",
		mutations, totalRequests, clients, accepted.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), deleted)
}
