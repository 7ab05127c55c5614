package integration_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/fx"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// slowStorage costs perOp for each operation of a storage call (a store
// that serves a fixed number of operations per second per connection),
// until recovered; its waits end with their context.
type slowStorage struct {
	ports.Storage
	perOp     time.Duration
	recovered chan struct{}
}

func (s *slowStorage) wait(ctx context.Context, ops int) error {
	select {
	case <-s.recovered:
		return nil
	default:
	}
	t := time.NewTimer(s.perOp * time.Duration(ops))
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.recovered:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (s *slowStorage) Read(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	if err := s.wait(ctx, len(addrs)); err != nil {
		out := make([]ports.ReadResult, len(addrs))
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	return s.Storage.Read(ctx, addrs)
}

func (s *slowStorage) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	if err := s.wait(ctx, len(ops)); err != nil {
		out := make([]ports.WriteResult, len(ops))
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	return s.Storage.Write(ctx, ops)
}

// exactCodec is grpc-go's proto codec, except that it marshals a message
// into a buffer of its own size: the default codec takes a 1 MiB buffer
// of its pool for each message between 32 KiB and 1 MiB, and the clients
// share the test's heap with the server.
type exactCodec struct{ encoding.CodecV2 }

func (c exactCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := proto.Marshal(v.(proto.Message))
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

// overloadCall is what one client call saw.
type overloadCall struct {
	start, end time.Time
	code       codes.Code
	retryDelay time.Duration // RESOURCE_EXHAUSTED: its RetryInfo delay (0: none)
	message    string
}

// overloadPeaks are the peaks of the process's runtime metrics and of the
// server's in-flight operations, sampled during a run.
type overloadPeaks struct {
	heap, goroutines, live uint64
	inflightOps            int
}

// sampleRuntime samples the heap (objects, including garbage not yet
// collected), the goroutines and the server's in-flight operations every
// 10 ms until stop is closed, and returns their peaks.
func sampleRuntime(ep *bootstrap.GRPCEndpoint, stop <-chan struct{}) <-chan overloadPeaks {
	out := make(chan overloadPeaks, 1)
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/sched/goroutines:goroutines"}, {Name: "/gc/heap/live:bytes"}}
		var p overloadPeaks
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			p.heap = max(p.heap, s[0].Value.Uint64())
			p.goroutines = max(p.goroutines, s[1].Value.Uint64())
			p.live = max(p.live, s[2].Value.Uint64())
			_, ops := ep.InFlight()
			p.inflightOps = max(p.inflightOps, ops)
			select {
			case <-stop:
				out <- p
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// The server under ten times the load its storage can serve, from many
// clients over a real gRPC server: requests beyond the in-flight bound
// fail fast with RESOURCE_EXHAUSTED carrying RetryInfo, no call outlives
// its deadline by more than a small margin (and when the load stops, the
// server lets go of every call within that margin of the clients' last
// one), the heap grows by less than 64 MiB and the goroutines stay
// bounded; when storage recovers, the whole offered load is served again
// within seconds.
//
// The storage costs 20 ms per operation, one batch at a time (one
// natural-batching shard): 50 operations/s. The clients offer 500 single
// puts of 32 KiB per second, open loop (a new call every 2 ms whatever the
// others do), each with a 2 s deadline. Without the bound (set
// SINK_MAX_INFLIGHT_OPERATIONS to 0 below) the calls pile up in the server
// until their deadlines and nothing is refused: in one run 1,335
// operations in flight, 2,224 more goroutines and 133 MiB more heap; the
// test fails.
func TestOverloadRefusesFastAndRecovers(t *testing.T) {
	const (
		bound    = 64
		perOp    = 20 * time.Millisecond
		interval = 2 * time.Millisecond // 500 calls/s: 10× the 50 operations/s storage serves
		deadline = 2 * time.Second
		docBytes = 32 << 10
		clients  = 16 // connections
		slowFor  = 3 * time.Second
		margin   = 500 * time.Millisecond // past a deadline (the machine may be shared and busy)
	)
	slow := &slowStorage{perOp: perOp, recovered: make(chan struct{})}
	var ep *bootstrap.GRPCEndpoint
	s := sinktest.Start(t, map[string]string{
		"SINK_MAX_INFLIGHT_OPERATIONS": fmt.Sprint(bound),
		"SINK_MAX_OPERATIONS":          fmt.Sprint(bound),
		"SINK_BATCH_SHARDS":            "1",
		"SINK_LOG_LEVEL":               "error",
	}, fx.Decorate(func(st ports.Storage) ports.Storage { slow.Storage = st; return slow }), fx.Populate(&ep))
	conns := make([]sinkv1.SinkClient, clients)
	for i := range conns {
		conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(exactCodec{encoding.GetCodecV2(protoenc.Name)})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		conns[i] = sinkv1.NewSinkClient(conn)
		write(t, conns[i], putOp(addr("ov", "d", fmt.Sprint("warm", i)), `{}`, 0, nil)) // connected, and the storage is slow
	}
	doc := []byte(`{"p":"` + strings.Repeat("x", docBytes) + `"}`)

	var mu sync.Mutex
	var calls []overloadCall
	// startLoad starts the open-loop clients: one call every interval,
	// whatever the others do. It returns the function that stops them and
	// waits until every call they made ended.
	startLoad := func() (stop func()) {
		var outstanding sync.WaitGroup
		stopLoad := make(chan struct{})
		loadDone := make(chan struct{})
		go func() {
			defer close(loadDone)
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stopLoad:
					return
				case <-tick.C:
				}
				outstanding.Add(1)
				go func() {
					defer outstanding.Done()
					c := overloadCall{start: time.Now()}
					cctx, cancel := context.WithTimeout(context.Background(), deadline)
					_, err := conns[i%clients].Write(cctx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{
						{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{Address: addr("ov", "d", fmt.Sprint(i%256)),
							Document: &sinkv1.Document{ContentType: "application/json", Data: doc}}}}}})
					cancel()
					c.end = time.Now()
					st := status.Convert(err)
					c.code, c.message = st.Code(), st.Message()
					for _, d := range st.Details() {
						if ri, ok := d.(*errdetails.RetryInfo); ok {
							c.retryDelay = ri.GetRetryDelay().AsDuration()
						}
					}
					mu.Lock()
					calls = append(calls, c)
					mu.Unlock()
				}()
			}
		}()
		var once sync.Once
		return func() {
			once.Do(func() {
				close(stopLoad)
				<-loadDone
				outstanding.Wait()
			})
		}
	}

	// Overload, then no load: the server lets go of every call by its
	// deadline (storage is still slow; its waits end with the calls).
	runtime.GC()
	base := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/sched/goroutines:goroutines"}}
	metrics.Read(base)
	stopSampling := make(chan struct{})
	peaks := sampleRuntime(ep, stopSampling)
	stop := startLoad()
	time.Sleep(slowFor) // the load runs for this long (a duration, not a wait for an event)
	stop()
	ended := time.Now() // the last client call ended (by its deadline at the latest)
	eventually(t, margin, "the server to finish every call", func() (bool, string) {
		rpcs, ops := ep.InFlight()
		return rpcs == 0, fmt.Sprintf("%d RPCs, %d operations in flight", rpcs, ops)
	})
	idle := time.Since(ended)

	// Overload again, and storage recovers under it.
	stop = startLoad()
	defer stop()
	time.Sleep(time.Second) // the load runs for this long
	close(stopSampling)
	p := <-peaks
	recovered := time.Now()
	close(slow.recovered)

	// Recovery: await a 500 ms window in which (nearly) every call offered
	// was served. (On a busy machine the clients offer less than 500
	// calls/s, and the server may not keep up with them at once.)
	var servedAt time.Time
	eventually(t, 30*time.Second, "the whole offered load to be served again", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		windows := map[int64][2]int{} // window -> calls, served
		for _, c := range calls {
			if c.start.Before(recovered) {
				continue
			}
			w := c.start.Sub(recovered).Milliseconds() / 500
			n := windows[w]
			n[0]++
			if c.code == codes.OK {
				n[1]++
			}
			windows[w] = n
		}
		for w := int64(0); ; w++ {
			n, ok := windows[w]
			if !ok || time.Since(recovered.Add(time.Duration(w+1)*500*time.Millisecond)) < deadline {
				return false, fmt.Sprintf("windows since recovery (calls, served): %v", windows)
			}
			if n[0] >= 100 && n[1] >= n[0]*98/100 { // at least 100 calls (200/s), 98% of them served
				servedAt = recovered.Add(time.Duration(w+1) * 500 * time.Millisecond)
				return true, ""
			}
		}
	})
	stop()

	mu.Lock()
	defer mu.Unlock()
	var refused, ok, expired int
	var refusals []time.Duration
	for _, c := range calls {
		took := c.end.Sub(c.start)
		if took > deadline+margin {
			t.Errorf("a call took %v, more than its %v deadline plus %v (%v: %s)", took, deadline, margin, c.code, c.message)
		}
		if !c.start.Before(recovered) {
			continue
		}
		switch c.code {
		case codes.OK:
			ok++
		case codes.DeadlineExceeded:
			expired++
		case codes.ResourceExhausted:
			refused++
			refusals = append(refusals, took)
			if c.retryDelay <= 0 || c.retryDelay > 2*time.Second || !strings.HasPrefix(c.message, "server overloaded") {
				t.Errorf("refusal with RetryInfo delay %v: %s", c.retryDelay, c.message)
			}
		default:
			t.Errorf("a call failed with %v: %s", c.code, c.message)
		}
	}
	slices.Sort(refusals)
	heapGrowth := int64(p.heap) - int64(base[0].Value.Uint64())
	goroutineGrowth := int64(p.goroutines) - int64(base[1].Value.Uint64())
	total := ok + expired + refused
	pct := func(n int) float64 { return 100 * float64(n) / float64(max(total, 1)) }
	t.Logf("overload (%v, storage at 50 operations/s, 500 calls/s offered): %d calls: %d OK, %d refused (%.0f%%), %d past their deadline; in-flight operations at most %d (bound %d)",
		slowFor+time.Second, total, ok, refused, pct(refused), expired, p.inflightOps, bound)
	if len(refusals) > 0 {
		t.Logf("refusal latency: median %v, p99 %v, max %v", refusals[len(refusals)/2], refusals[len(refusals)*99/100], refusals[len(refusals)-1])
	}
	t.Logf("heap growth at most %.1f MiB (live heap at most %.1f MiB), goroutines at most %d above the %d before the load; the server finished its calls %v after the clients' last ended; the whole offered load served again %v after storage recovered",
		float64(heapGrowth)/(1<<20), float64(p.live)/(1<<20), goroutineGrowth, base[1].Value.Uint64(), idle.Round(time.Millisecond), servedAt.Sub(recovered).Round(10*time.Millisecond))

	overloaded := slowFor + time.Second
	if served := int(overloaded / perOp); total < 2*served {
		// The clients did not get to overload the server (another 10× the
		// storage's rate is what they try).
		t.Skipf("the machine is too busy: the clients made %d calls in %v, not even twice the %d the storage serves", total, overloaded, served)
	}
	if refused < total/4 {
		t.Errorf("%d of %d calls refused under overload, want far more", refused, total)
	}
	if p.inflightOps > bound {
		t.Errorf("%d operations in flight, over the bound of %d", p.inflightOps, bound)
	}
	if len(refusals) > 0 && refusals[len(refusals)/2] >= perOp {
		t.Errorf("median refusal took %v, as long as a storage operation (%v): refusals wait", refusals[len(refusals)/2], perOp)
	}
	if heapGrowth >= 64<<20 {
		t.Errorf("heap grew by %.1f MiB under overload, want < 64 MiB", float64(heapGrowth)/(1<<20))
	}
	if goroutineGrowth >= 600 {
		t.Errorf("%d more goroutines under overload, want < 600", goroutineGrowth)
	}
}

// BenchmarkInFlightOperations measures what the in-flight bound's default
// (SINK_MAX_INFLIGHT_OPERATIONS) rests on: closed-loop clients sending
// single puts of 1 KiB documents to memory storage with a 1 ms round trip,
// without a bound (unless SINK_BENCH_ENV sets one), for growing numbers of
// clients. It reports puts/s, the peak operations in flight, the p99
// latency, and the peaks of live heap growth and goroutines of the process
// (server and clients).
// Throughput stops growing long before the clients reach the default
// bound; beyond, more in flight only adds latency and heap.
//
//	go test -run '^$' -bench InFlightOperations -benchtime 20000x ./integration/
func BenchmarkInFlightOperations(b *testing.B) {
	for _, clients := range []int{16, 64, 256, 1024, 4096} {
		b.Run(fmt.Sprint("clients=", clients), func(b *testing.B) {
			var ep *bootstrap.GRPCEndpoint
			s, _ := startDelayedWith(b, time.Millisecond, map[string]string{"SINK_MAX_INFLIGHT_OPERATIONS": "0"},
				func(d *storagetest.Delayed) ports.Storage { return d }, fx.Populate(&ep))
			// A connection per 16 clients (one carries at most
			// SINK_GRPC_MAX_CONCURRENT_STREAMS calls at once).
			conns := make([]sinkv1.SinkClient, (clients+15)/16)
			for i := range conns {
				conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = conn.Close() })
				conns[i] = sinkv1.NewSinkClient(conn)
			}
			doc := `{"payload":"` + strings.Repeat("x", 1000) + `"}`
			runtime.GC()
			base := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
			metrics.Read(base)
			stop := make(chan struct{})
			peaks := sampleRuntime(ep, stop)
			n := max(b.N, 4*clients)
			b.ResetTimer()
			r := runLoad(b, clients, n, func(i int) (codes.Code, error) {
				return writeCode(conns[i%len(conns)], putOp(addr("bench", "inflight", fmt.Sprint(i%10000)), doc, 0, nil))
			})
			b.StopTimer()
			close(stop)
			p := <-peaks
			b.ReportMetric(r.rate(), "puts/s")
			b.ReportMetric(float64(p.inflightOps), "peak-inflight-ops")
			b.ReportMetric(float64(percentile(r.lat, 0.99).Microseconds()), "p99-µs")
			b.ReportMetric(float64(int64(p.live)-int64(base[0].Value.Uint64()))/(1<<20), "live-heap-growth-MiB")
			b.ReportMetric(float64(p.goroutines), "peak-goroutines")
		})
	}
}
