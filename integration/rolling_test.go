package integration_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/countprofile"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// rollingClient is a client as docs/operations.md describes one: it
// knows every server (round robin), gives every write an idempotency key,
// and retries what answered UNAVAILABLE — the whole request, or the
// operations that failed with it — with the same keys, so that a retry
// never applies a write twice. Anything else is a failure.
type rollingClient struct {
	c sinkv1.SinkClient

	mu          sync.Mutex
	acked       map[string]bool // idempotency keys of the writes answered APPLIED
	failures    []string
	unavailable int           // UNAVAILABLE answers retried
	longest     time.Duration // of one operation, retries included
}

// write sends ops (each with an idempotency key, keys[j]) until every one
// is applied or fails otherwise than with UNAVAILABLE.
func (r *rollingClient) write(ops []*sinkv1.WriteOperation, keys []string) {
	start := time.Now()
	pending := make([]int, len(ops))
	for j := range pending {
		pending[j] = j
	}
	backoff := 20 * time.Millisecond
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt == 100 {
			r.fail(fmt.Sprintf("%d operations still UNAVAILABLE after 100 attempts (first %s)", len(pending), keys[pending[0]]))
			return
		}
		if attempt > 0 {
			time.Sleep(backoff/2 + rand.N(backoff)) // the client's backoff between retries
			backoff = min(2*backoff, 500*time.Millisecond)
		}
		req := &sinkv1.WriteRequest{Operations: make([]*sinkv1.WriteOperation, len(pending))}
		for k, j := range pending {
			req.Operations[k] = ops[j]
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		resp, err := r.c.Write(ctx, req)
		cancel()
		if err != nil {
			if status.Code(err) == codes.Unavailable {
				r.count()
				continue
			}
			r.fail(fmt.Sprintf("%s: %v", keys[pending[0]], err))
			return
		}
		var next []int
		for k, res := range resp.GetResults() {
			j := pending[k]
			switch {
			case res.GetStatus() == applied:
				r.mu.Lock()
				r.acked[keys[j]] = true
				r.mu.Unlock()
			case res.GetError().GetCode() == uint32(codes.Unavailable):
				r.count()
				next = append(next, j)
			default:
				r.fail(fmt.Sprintf("%s: %v %v", keys[j], res.GetStatus(), res.GetError()))
			}
		}
		pending = next
	}
	r.mu.Lock()
	r.longest = max(r.longest, time.Since(start))
	r.mu.Unlock()
}

func (r *rollingClient) count() {
	r.mu.Lock()
	r.unavailable++
	r.mu.Unlock()
}

func (r *rollingClient) fail(msg string) {
	r.mu.Lock()
	r.failures = append(r.failures, msg)
	r.mu.Unlock()
}

func (r *rollingClient) ackedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acked)
}

// A rolling restart under load: two server processes of the sink binary
// (its sinkcount build, with the non-idempotent count profile) over one
// MongoDB-wire store, each stopped with SIGTERM and started again on its
// address while clients write, then one killed with SIGKILL and started
// again. The clients retry UNAVAILABLE as documented and see no failed
// operation; every acknowledged write is in the store, and every
// acknowledged merge was applied exactly once (without idempotency keys,
// the retries after the SIGKILL apply some twice).
func TestRollingRestartLosesNothing(t *testing.T) {
	asyncSkipShort(t)
	mongo := mongotest.Shared(t)
	ns := mongotest.DatabaseName(t)
	argv := []string{asyncBuildSinkCount(t)}
	var addrs [2]string
	env := func(i int) []string {
		e := []string{"SINK_GRPC_ADDRESS=" + addrs[i], "SINK_SHUTDOWN_TIMEOUT=15s"}
		for k, v := range mongo.SinkEnv() {
			e = append(e, k+"="+v)
		}
		return e
	}
	var procs [2]*sinkProcess
	for i := range procs {
		addrs[i] = "127.0.0.1:" + strconv.Itoa(kafkatest.FreePort(t))
		procs[i] = startProcessOf(t, argv, env(i)...)
	}

	// The client knows both servers and spreads its calls over them.
	res := manual.NewBuilderWithScheme("rolling")
	res.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: addrs[0]}, {Addr: addrs[1]}}})
	conn, err := grpc.NewClient(res.Scheme()+":///sink", grpc.WithResolvers(res), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := &rollingClient{c: sinkv1.NewSinkClient(conn), acked: map[string]bool{}}

	// Each writer's request: a keyed merge of the count profile on one of
	// a few shared counters (merges of two servers contend) and a keyed
	// put of a record of its own.
	const writers, counters = 6, 8
	counter := func(i int) *sinkv1.RecordAddress { return addr(ns, "counters", fmt.Sprintf("c%d", i)) }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tag := fmt.Sprintf("w%d-%d", w, i)
				intent, err := countprofile.Encode(domain.ContentTypeBSON, countprofile.Intent{Add: 1, ID: "m-" + tag})
				if err != nil {
					client.fail(err.Error())
					return
				}
				put := opsBSONPut(t, addr(ns, "puts", "p-"+tag), bson.D{{Key: "w", Value: w}, {Key: "i", Value: i}})
				put.GetPut().IdempotencyKey = "p-" + tag
				client.write([]*sinkv1.WriteOperation{
					{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{Address: counter((w + i) % counters), Profile: countprofile.Name,
						Intent: &sinkv1.Document{ContentType: intent.ContentType, Data: intent.Data}, IdempotencyKey: "m-" + tag}}},
					put,
				}, []string{"m-" + tag, "p-" + tag})
			}
		}()
	}
	stopWriters := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer stopWriters()
	progress := func(more int) {
		t.Helper()
		want := client.ackedCount() + more
		eventually(t, 60*time.Second, fmt.Sprintf("%d acknowledged writes", want), func() (bool, string) {
			n := client.ackedCount()
			return n >= want, fmt.Sprint(n, " acknowledged")
		})
	}

	progress(200)
	// A rolling restart (SIGTERM: each server drains), then a crash
	// (SIGKILL: its calls in flight end UNAVAILABLE, with outcomes the
	// client does not know; its retries with the same keys apply each
	// write once).
	for _, step := range []struct {
		server int
		sig    syscall.Signal
	}{{0, syscall.SIGTERM}, {1, syscall.SIGTERM}, {0, syscall.SIGKILL}} {
		i := step.server
		client.mu.Lock()
		before := client.unavailable
		client.mu.Unlock()
		sent := time.Now()
		if err := procs[i].cmd.Process.Signal(step.sig); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-procs[i].exited:
			if err != nil && step.sig == syscall.SIGTERM {
				t.Fatalf("server %d exited with %v after SIGTERM, want 0", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("server %d did not exit within 30 s of %v", i, step.sig)
		}
		t.Logf("server %d exited %v after %v", i, time.Since(sent).Round(time.Millisecond), step.sig)
		progress(100) // served by the other server alone
		procs[i] = startProcessOf(t, argv, env(i)...)
		progress(200)
		client.mu.Lock()
		t.Logf("server %d %v: %d UNAVAILABLE answers retried", i, step.sig, client.unavailable-before)
		client.mu.Unlock()
	}
	stopWriters()

	client.mu.Lock()
	defer client.mu.Unlock()
	if len(client.failures) > 0 {
		t.Errorf("%d failed operations, want 0; first: %s", len(client.failures), client.failures[0])
	}
	// Every acknowledged put is stored; every acknowledged merge was
	// applied exactly once, and nothing else was.
	merges := 0
	var puts []*sinkv1.ReadOperation
	var putKeys []string
	for k := range client.acked {
		switch k[0] {
		case 'm':
			merges++
		case 'p':
			puts = append(puts, &sinkv1.ReadOperation{Address: addr(ns, "puts", k)})
			putKeys = append(putKeys, k)
		}
	}
	var missing []string
	for start := 0; start < len(puts); start += 500 {
		end := min(start+500, len(puts))
		resp, err := client.c.Read(ctx(t), &sinkv1.ReadRequest{Operations: puts[start:end]})
		if err != nil {
			t.Fatal(err)
		}
		for j, r := range resp.GetResults() {
			if r.GetStatus() != found {
				missing = append(missing, putKeys[start+j])
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d acknowledged puts are not stored, e.g. %s", len(missing), len(puts), missing[0])
	}
	ops := make([]*sinkv1.ReadOperation, counters)
	for i := range ops {
		ops[i] = &sinkv1.ReadOperation{Address: counter(i)}
	}
	resp, err := client.c.Read(ctx(t), &sinkv1.ReadRequest{Operations: ops})
	if err != nil {
		t.Fatal(err)
	}
	total, seen := 0, map[string]int{}
	for i, r := range resp.GetResults() {
		if r.GetStatus() != found {
			t.Fatalf("counter %d: %v %v", i, r.GetStatus(), r.GetError())
		}
		var doc countprofile.Counter
		if err := countprofile.Decode(domain.Document{ContentType: r.GetDocument().GetContentType(), Data: r.GetDocument().GetData()}, &doc); err != nil {
			t.Fatal(err)
		}
		if doc.N != len(doc.IDs) {
			t.Errorf("counter %d: n=%d but %d ids", i, doc.N, len(doc.IDs))
		}
		total += doc.N
		for _, id := range doc.IDs {
			seen[id]++
		}
	}
	var lost, twice, unacked int
	for k := range client.acked {
		if k[0] == 'm' && seen[k] == 0 {
			lost++
		}
	}
	for id, n := range seen {
		if n > 1 {
			twice++
		}
		if !client.acked[id] {
			unacked++
		}
	}
	t.Logf("rolling restart of 2 servers and a crash of one under %d writers: %d merges and %d puts acknowledged, %d UNAVAILABLE answers retried, longest operation %v (retries included); %d merges applied",
		writers, merges, len(puts), client.unavailable, client.longest.Round(time.Millisecond), total)
	if lost > 0 || twice > 0 || unacked > 0 || total != merges {
		t.Errorf("merges: %d acknowledged, %d applied: %d lost, %d applied twice, %d applied but never acknowledged", merges, total, lost, twice, unacked)
	}
}
