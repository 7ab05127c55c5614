package integration_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sink-io/sink/internal/testkit/kafkatest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// While the (standalone, persistent) broker is down, async writes fail fast
// with retryable errors; once it is back the same process accepts again
// without a restart, and every mutation accepted before, during or after
// the outage is applied. The broker is stopped cleanly, or killed.
func TestAsyncBrokerRestart(t *testing.T) {
	asyncSkipShort(t)
	t.Run("stop", func(t *testing.T) { testAsyncBrokerRestart(t, (*kafkatest.Broker).Stop) })
	t.Run("kill", func(t *testing.T) { testAsyncBrokerRestart(t, (*kafkatest.Broker).Kill) })
}

func testAsyncBrokerRestart(t *testing.T, halt func(*kafkatest.Broker) error) {
	broker := kafkatest.StartBroker(t, kafkatest.Topics(asyncTopic, asyncDLT), kafkatest.Partitions(2))
	const publishTimeout = 2 * time.Second
	s := asyncStartAll(t, []string{broker.Addr()}, map[string]string{"SINK_KAFKA_PUBLISH_TIMEOUT": publishTimeout.String()})
	c := s.Client

	type outcome struct {
		acceptedKeys []string
		retryable    int
		other        []string
		slowest      time.Duration
	}
	var (
		mu      sync.Mutex
		out     outcome
		n       atomic.Int64
		phase   atomic.Int32 // 0 up, 1 down, 2 back up
		byPhase [3]struct{ ok, failed int }
	)
	// send writes one request of 5 puts on fresh keys and records the outcome.
	send := func() {
		keys := make([]string, 5)
		ops := make([]*sinkv1.WriteOperation, len(keys))
		for i := range keys {
			keys[i] = fmt.Sprintf("k%05d", n.Add(1))
			ops[i] = putOp(addr("outage", "puts", keys[i]), fmt.Sprintf(`{"key":%q}`, keys[i]), sinkv1.PutMode_PUT_MODE_UPSERT, nil)
		}
		p := phase.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		resp, err := asyncWrite(ctx, c, ops...)
		took := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		out.slowest = max(out.slowest, took)
		if err == nil {
			allAccepted := true
			for i, r := range resp.GetResults() {
				if r.GetStatus() == accepted {
					out.acceptedKeys = append(out.acceptedKeys, keys[i])
				} else {
					allAccepted = false
				}
			}
			if allAccepted {
				byPhase[p].ok++
				return
			}
		}
		if ok, why := retryableFailure(resp, err); ok || (err == nil && partiallyRetryable(resp)) {
			out.retryable++
			byPhase[p].failed++
			return
		} else {
			out.other = append(out.other, why)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				send()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	counts := func(p int) (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return byPhase[p].ok, byPhase[p].failed
	}
	eventually(t, 20*time.Second, "accepted writes before the outage", func() (bool, string) {
		ok, _ := counts(0)
		return ok >= 5, fmt.Sprint(ok)
	})

	if err := halt(broker); err != nil {
		t.Fatal(err)
	}
	downAt := time.Now()
	phase.Store(1)
	eventually(t, 30*time.Second, "retryable failures while the broker is down", func() (bool, string) {
		_, failed := counts(1)
		return failed >= 4, fmt.Sprint(failed)
	})
	if err := broker.Start(); err != nil {
		t.Fatal(err)
	}
	down := time.Since(downAt)
	phase.Store(2)
	eventually(t, 60*time.Second, "accepted writes after the broker is back", func() (bool, string) {
		ok, _ := counts(2)
		return ok >= 5, fmt.Sprint(ok)
	})
	close(stop)
	wg.Wait()

	mu.Lock()
	res := out
	mu.Unlock()
	if len(res.other) > 0 {
		t.Fatalf("%d writes had non-retryable outcomes, first: %s", len(res.other), res.other[0])
	}
	if res.slowest > publishTimeout+5*time.Second {
		t.Errorf("slowest async write took %v; the publish timeout is %v", res.slowest, publishTimeout)
	}
	for _, key := range res.acceptedKeys {
		k := key
		eventuallyState(t, c, addr("outage", "puts", k), fmt.Sprintf(`{"key":%q}`, k), 60*time.Second)
	}
	ok0, _ := counts(0)
	ok1, f1 := counts(1)
	ok2, _ := counts(2)
	t.Logf("broker down for %v; requests accepted before/during/after: %d/%d/%d, retryable failures during the outage: %d; slowest request %v; all %d accepted mutations applied",
		down.Round(time.Millisecond), ok0, ok1, ok2, f1, res.slowest.Round(time.Millisecond), len(res.acceptedKeys))
}

// partiallyRetryable: some operations accepted, the others FAILED retryable.
func partiallyRetryable(resp *sinkv1.WriteResponse) bool {
	for _, r := range resp.GetResults() {
		if r.GetStatus() == accepted {
			continue
		}
		if e := r.GetError(); r.GetStatus() != failedStatus || e == nil || !e.GetRetryable() {
			return false
		}
	}
	return true
}
