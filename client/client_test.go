package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/client"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
	"github.com/sink-io/sink/sinktest"
)

// faultStore wraps the memory store: it counts the puts that reach
// storage (the server-side arrivals) and those applied, and can hold the
// next writes after applying them until the request's context ends, so
// that the client's attempt times out after the server applied the write
// (an unknown outcome).
type faultStore struct {
	ports.Storage
	hang     atomic.Int32 // how many more writes to hold
	mu       sync.Mutex
	arrivals map[string]int // put arrivals per string key
	applied  map[string]int // puts applied per string key
}

func newFaultStore() *faultStore {
	return &faultStore{Storage: memory.New(), arrivals: map[string]int{}, applied: map[string]int{}}
}

func (f *faultStore) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	res := f.Storage.Write(ctx, ops)
	f.mu.Lock()
	for i, op := range ops {
		if op.Kind != ports.WritePut {
			continue
		}
		k := op.Address.Key.String()
		f.arrivals[k]++
		if res[i].Err == nil {
			f.applied[k]++
		}
	}
	f.mu.Unlock()
	if f.hang.Add(-1) >= 0 {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
		}
	}
	return res
}

func (f *faultStore) counts(key string) (arrivals, applied int) {
	k := domain.StringKey(key).String()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.arrivals[k], f.applied[k]
}

type order struct {
	Customer string `json:"customer" bson:"customer"`
	Total    int    `json:"total" bson:"total"`
}

func TestWriteWithoutKeyIsNeverResentAfterUnknownOutcome(t *testing.T) {
	st := newFaultStore()
	srv := sinktest.Start(t, sinktest.WithStorage(st), sinktest.WithEnv("SINK_BATCH_SINGLE_OPS", "false"))
	c := srv.NewClient(t, client.WithAttemptTimeout(300*time.Millisecond), client.WithRetry(5, time.Millisecond, 10*time.Millisecond))
	ds := c.Dataset("shop", "orders")

	st.hang.Store(1) // the first put is applied, then its answer never comes
	_, err := ds.Put(context.Background(), client.StringKey("o-1"), order{Customer: "ada", Total: 1})
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("Put = %v, want ErrOutcomeUnknown", err)
	}
	var oe *client.OperationError
	if !errors.As(err, &oe) || oe.Attempts != 1 || oe.Retryable() {
		t.Fatalf("error %#v: want 1 attempt, not retryable", oe)
	}
	if arrivals, applied := st.counts("o-1"); arrivals != 1 || applied != 1 {
		t.Fatalf("the put reached storage %d times (applied %d), want exactly once", arrivals, applied)
	}
	// It was applied even though the client could not know.
	var got order
	if _, err := ds.Get(context.Background(), client.StringKey("o-1"), &got); err != nil || got.Total != 1 {
		t.Fatalf("Get = %+v, %v", got, err)
	}
}

func TestWriteWithAutoKeyIsRetriedAndAppliedOnce(t *testing.T) {
	st := newFaultStore()
	srv := sinktest.Start(t, sinktest.WithStorage(st), sinktest.WithEnv("SINK_BATCH_SINGLE_OPS", "false"))
	c := srv.NewClient(t, client.WithAutoIdempotencyKeys(), client.WithAttemptTimeout(300*time.Millisecond), client.WithRetry(5, time.Millisecond, 10*time.Millisecond))
	ds := c.Dataset("shop", "orders")

	first, err := ds.Put(context.Background(), client.StringKey("o-1"), order{Customer: "ada", Total: 1})
	if err != nil {
		t.Fatal(err)
	}
	st.hang.Store(1)
	r, err := ds.Put(context.Background(), client.StringKey("o-1"), order{Customer: "ada", Total: 2})
	if err != nil {
		t.Fatalf("Put with an automatic key = %v, want success after a retry", err)
	}
	arrivals, applied := st.counts("o-1")
	if applied != 2 {
		t.Fatalf("puts applied: %d, want 2 (the first put and the retried one once)", applied)
	}
	if arrivals < 2 {
		t.Fatalf("arrivals %d: the hold did not happen", arrivals)
	}
	if bytes.Equal(r.Revision, first.Revision) || len(r.Revision) == 0 {
		t.Fatalf("the retry's revision %v should be the second put's", r.Revision)
	}
	var got order
	rev, err := ds.Get(context.Background(), client.StringKey("o-1"), &got)
	if err != nil || got.Total != 2 || !bytes.Equal(rev, r.Revision) {
		t.Fatalf("Get = %+v rev %v, %v; want total 2 at the retried put's revision %v", got, rev, err, r.Revision)
	}
}

func TestReadsAreRetriedAfterTimeouts(t *testing.T) {
	st := &slowReads{Storage: memory.New()}
	srv := sinktest.Start(t, sinktest.WithStorage(st), sinktest.WithEnv("SINK_BATCH_SINGLE_OPS", "false"))
	c := srv.NewClient(t, client.WithAttemptTimeout(200*time.Millisecond), client.WithRetry(3, time.Millisecond, 5*time.Millisecond))
	ds := c.Dataset("shop", "orders")
	if _, err := ds.Put(context.Background(), client.StringKey("o-1"), order{Total: 3}); err != nil {
		t.Fatal(err)
	}
	st.hang.Store(1)
	var got order
	if _, err := ds.Get(context.Background(), client.StringKey("o-1"), &got); err != nil || got.Total != 3 {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if n := st.reads.Load(); n < 2 {
		t.Fatalf("%d reads reached storage, want a retry", n)
	}
}

type slowReads struct {
	ports.Storage
	hang  atomic.Int32
	reads atomic.Int32
}

func (s *slowReads) Read(ctx context.Context, addrs []domain.Address) []ports.ReadResult {
	s.reads.Add(1)
	if s.hang.Add(-1) >= 0 {
		<-ctx.Done()
	}
	return s.Storage.Read(ctx, addrs)
}

// recorder is a client interceptor that records every request.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	target string
	ops    int
	bytes  int
	keys   []string
}

func (r *recorder) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	rec := recorded{target: cc.Target()}
	switch q := req.(type) {
	case *sinkv1.WriteRequest:
		rec.ops = len(q.Operations)
		for _, o := range q.Operations {
			if p := o.GetPut(); p != nil {
				rec.bytes += keySize(p.Address.Key) + len(p.Document.Data)
				rec.keys = append(rec.keys, p.Address.Key.GetString_())
			}
			if m := o.GetMerge(); m != nil {
				rec.bytes += keySize(m.Address.Key) + len(m.Intent.Data)
				rec.keys = append(rec.keys, m.Address.Key.GetString_())
			}
		}
	case *sinkv1.ReadRequest:
		rec.ops = len(q.Operations)
		for _, o := range q.Operations {
			rec.bytes += keySize(o.Address.Key)
			rec.keys = append(rec.keys, o.Address.Key.GetString_())
		}
	case *sinkv1.DeleteRequest:
		rec.ops = len(q.Operations)
		for _, o := range q.Operations {
			rec.bytes += keySize(o.Address.Key)
			rec.keys = append(rec.keys, o.Address.Key.GetString_())
		}
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err == nil {
		r.mu.Lock()
		r.reqs = append(r.reqs, rec)
		r.mu.Unlock()
	}
	return err
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.reqs...)
}

func keySize(k *sinkv1.RecordKey) int {
	if _, ok := k.Kind.(*sinkv1.RecordKey_Int64); ok {
		return 8
	}
	return len(k.GetString_()) + len(k.GetBytes()) + len(k.GetObjectId())
}

func TestBatchSplitsByBothLimits(t *testing.T) {
	const maxOps, maxBytes = 3, 200
	srv := sinktest.Start(t,
		sinktest.WithEnv("SINK_MAX_OPERATIONS", fmt.Sprint(maxOps)),
		sinktest.WithEnv("SINK_MAX_REQUEST_BYTES", fmt.Sprint(maxBytes)),
		sinktest.WithEnv("SINK_MAX_DOCUMENT_BYTES", fmt.Sprint(maxBytes)))
	for _, tc := range []struct {
		name    string
		payload int // bytes of the document's note
		n       int
		minReqs int // requests the limits force
	}{
		{"operations", 1, 10, 4},       // 10 small puts: 3+3+3+1
		{"bytes", 80, 9, 9 / 2},        // ~100-byte documents: two per request
		{"both", 30, 12, (12 + 2) / 3}, // ~50-byte documents: three per request by count
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			c := srv.NewClient(t, client.WithLimits(maxOps, maxBytes), client.WithDialOptions(grpc.WithUnaryInterceptor(rec.intercept)))
			ds := c.Dataset("ns", "split-"+tc.name)
			b := c.Batch()
			for i := range tc.n {
				b.Put(ds, client.StringKey(fmt.Sprintf("k%02d", i)), map[string]any{"note": string(bytes.Repeat([]byte("x"), tc.payload)), "i": i})
			}
			for i, r := range b.Do(context.Background()) {
				if r.Err != nil || r.Status != client.StatusApplied {
					t.Fatalf("operation %d: %v %v", i, r.Status, r.Err)
				}
			}
			reqs := rec.all()
			total := 0
			for _, q := range reqs {
				if q.ops > maxOps || q.bytes > maxBytes {
					t.Errorf("a request with %d operations and %d bytes exceeds %d/%d", q.ops, q.bytes, maxOps, maxBytes)
				}
				total += q.ops
			}
			if total != tc.n || len(reqs) < tc.minReqs {
				t.Fatalf("%d requests carried %d operations; want %d operations in at least %d requests", len(reqs), total, tc.n, tc.minReqs)
			}
			// Everything was written, in order.
			rb := c.Batch()
			for i := range tc.n {
				rb.Read(ds, client.StringKey(fmt.Sprintf("k%02d", i)))
			}
			for i, r := range rb.Do(context.Background()) {
				var v struct{ I int }
				if err := r.Decode(&v); err != nil || v.I != i {
					t.Fatalf("read %d: %+v, %v", i, v, err)
				}
			}
		})
	}
}

func TestBatchWithoutSplitExceedsServerLimit(t *testing.T) {
	// The counter-test: a client that believes the server accepts more
	// gets the whole-request error, so the split above is what keeps
	// requests valid.
	srv := sinktest.Start(t, sinktest.WithEnv("SINK_MAX_OPERATIONS", "3"))
	c := srv.NewClient(t, client.WithLimits(10, 0))
	ds := c.Dataset("ns", "ds")
	b := c.Batch()
	for i := range 5 {
		b.Put(ds, client.Int64Key(int64(i)), map[string]int{"i": i})
	}
	for i, r := range b.Do(context.Background()) {
		if !errors.Is(r.Err, client.ErrInvalidArgument) {
			t.Fatalf("operation %d: %v, want ErrInvalidArgument (too many operations)", i, r.Err)
		}
	}
}

func TestRoutingKeepsARecordOnOneServerAndFailsOver(t *testing.T) {
	shared := memory.New()
	a := sinktest.Start(t, sinktest.WithStorage(shared))
	b := sinktest.Start(t, sinktest.WithStorage(shared))
	rec := &recorder{}
	c := a.NewClient(t, client.WithServers(a.Addr(), b.Addr()), client.WithDialOptions(grpc.WithUnaryInterceptor(rec.intercept)),
		client.WithRetry(4, time.Millisecond, 10*time.Millisecond), client.WithFailoverCooldown(time.Minute))
	ds := c.Dataset("shop", "counters")
	ctx := context.Background()

	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprintf("r%d", i)
	}
	for _, k := range keys {
		if _, err := ds.Put(ctx, client.StringKey(k), map[string]int{"n": 0}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := ds.Merge(ctx, client.StringKey(k), "merge-patch", map[string]string{"by": k}); err != nil {
				t.Fatal(err)
			}
		}
		var v map[string]any
		if _, err := ds.Get(ctx, client.StringKey(k), &v); err != nil {
			t.Fatal(err)
		}
	}
	// A batch over every record, split per server.
	bt := c.Batch()
	for _, k := range keys {
		bt.Read(ds, client.StringKey(k))
	}
	for i, r := range bt.Do(ctx) {
		if !r.Found() {
			t.Fatalf("batch read %d: %v %v", i, r.Status, r.Err)
		}
	}
	servedBy := map[string]string{}
	perServer := map[string]int{}
	for _, q := range rec.all() {
		for _, k := range q.keys {
			if prev, ok := servedBy[k]; ok && prev != q.target {
				t.Fatalf("record %s went to %s and to %s", k, prev, q.target)
			}
			servedBy[k] = q.target
			perServer[q.target]++
		}
	}
	for _, k := range keys {
		if want := c.ServerFor("", "shop", "counters", client.StringKey(k)); servedBy[k] != want {
			t.Fatalf("record %s went to %s; the rendezvous hash picks %s", k, servedBy[k], want)
		}
	}
	if len(perServer) != 2 {
		t.Fatalf("all records went to one server: %v", perServer)
	}

	// Stop the server of keys[0]: its records move to the other one.
	victim := servedBy[keys[0]]
	other := a
	if victim == a.Addr() {
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		other = b
	} else if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// A write without a key: the stopped server never got it, so it is
	// safely sent to the next choice.
	if _, err := ds.Put(ctx, client.StringKey(keys[0]), map[string]int{"n": 1}); err != nil {
		t.Fatalf("put after the server stopped: %v", err)
	}
	var v map[string]int
	if _, err := ds.Get(ctx, client.StringKey(keys[0]), &v); err != nil || v["n"] != 1 {
		t.Fatalf("Get = %v, %v", v, err)
	}
	if got := c.ServerFor("", "shop", "counters", client.StringKey(keys[0])); got != other.Addr() {
		t.Fatalf("after the failure the record routes to %s, want %s", got, other.Addr())
	}
}

func TestTypedErrors(t *testing.T) {
	c := sinktest.New(t)
	ds := c.Dataset("shop", "orders")
	ctx := context.Background()
	var v order

	_, err := ds.Get(ctx, client.StringKey("missing"), &v)
	check(t, "Get of a missing record", err, client.ErrNotFound, "NOT_FOUND")
	_, err = ds.Replace(ctx, client.StringKey("missing"), order{})
	check(t, "Replace of a missing record", err, client.ErrNotFound, "NOT_FOUND")
	r, err := ds.Create(ctx, client.StringKey("o"), order{Total: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ds.Create(ctx, client.StringKey("o"), order{Total: 2})
	check(t, "Create of an existing record", err, client.ErrAlreadyExists, "ALREADY_EXISTS")
	_, err = ds.Put(ctx, client.StringKey("o"), order{Total: 3}, client.WithExpectedRevision(append(client.Revision{}, r.Revision...)))
	if err != nil {
		t.Fatalf("Put at the current revision: %v", err)
	}
	_, err = ds.Put(ctx, client.StringKey("o"), order{Total: 4}, client.WithExpectedRevision(r.Revision))
	check(t, "Put at an old revision", err, client.ErrRevisionMismatch, "REVISION_MISMATCH")
	_, err = ds.Merge(ctx, client.StringKey("o"), "no-such-profile", map[string]int{"total": 1})
	check(t, "Merge with an unknown profile", err, client.ErrInvalidArgument, "INVALID_ARGUMENT")
	_, err = c.Dataset("shop", "").Put(ctx, client.StringKey("o"), order{})
	check(t, "Put without a dataset", err, client.ErrInvalidArgument, "INVALID_ARGUMENT")
	_, err = ds.Put(ctx, client.StringKey("o"), order{}, client.WithCompletion(client.ReturnAfterAccepted))
	check(t, "RETURN_AFTER_ACCEPTED without a queue", err, client.ErrFailedPrecondition, "FAILED_PRECONDITION")
	_, err = ds.Put(ctx, client.StringKey("o"), make(chan int))
	check(t, "Put of a value JSON cannot encode", err, client.ErrInvalidArgument, "INVALID_ARGUMENT")
	// A delete of a missing record is no error.
	dr, err := ds.Delete(ctx, client.StringKey("missing"))
	if err != nil || dr.Status != client.StatusNotFound {
		t.Fatalf("Delete of a missing record = %v, %v", dr.Status, err)
	}
	// The caller's cancellation.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = ds.Get(cctx, client.StringKey("o"), &v)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with a canceled context = %v", err)
	}
}

func check(t *testing.T, what string, err, want error, reason string) {
	t.Helper()
	var oe *client.OperationError
	switch {
	case !errors.Is(err, want):
		t.Errorf("%s: %v, want %v", what, err, want)
	case !errors.As(err, &oe) || oe.Reason != reason || oe.Message == "":
		t.Errorf("%s: %#v, want an *OperationError with reason %s and a message", what, err, reason)
	case oe.Retryable():
		t.Errorf("%s: %v is retryable", what, err)
	}
	for _, other := range []error{client.ErrNotFound, client.ErrAlreadyExists, client.ErrRevisionMismatch, client.ErrInvalidArgument, client.ErrOutcomeUnknown} {
		if other != want && errors.Is(err, other) {
			t.Errorf("%s: %v also matches %v", what, err, other)
		}
	}
}

func TestCodecsRoundTripEveryKeyKind(t *testing.T) {
	c := sinktest.New(t)
	ctx := context.Background()
	oid := bson.NewObjectID()
	keys := []client.Key{client.StringKey("s"), client.Int64Key(-42), client.BytesKey([]byte{0, 0xff, 7}), client.ObjectIDKey(oid)}
	type doc struct {
		Name  string            `json:"name" bson:"name"`
		Tags  []string          `json:"tags" bson:"tags"`
		Attrs map[string]string `json:"attrs" bson:"attrs"`
		N     int64             `json:"n" bson:"n"`
	}
	for _, codec := range []client.Codec{client.JSON, client.BSON} {
		ds := c.Dataset("ns", "codec", client.WithCodec(codec))
		for i, k := range keys {
			want := doc{Name: codec.ContentType() + k.String(), Tags: []string{"a", "b"}, Attrs: map[string]string{"x": "y"}, N: int64(i) << 40}
			if _, err := ds.Put(ctx, k, want); err != nil {
				t.Fatalf("%s %s: %v", codec.ContentType(), k, err)
			}
			var got doc
			if _, err := ds.Get(ctx, k, &got); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s %s: got %+v, want %+v", codec.ContentType(), k, got, want)
			}
			r := c.Batch()
			r.Read(ds, k)
			if ct := r.Do(ctx)[0].ContentType(); ct != codec.ContentType() {
				t.Fatalf("stored as %q, want %q", ct, codec.ContentType())
			}
		}
	}
	// A JSON handle reads a BSON document by its content type.
	var got struct{ Name string }
	if _, err := c.Dataset("ns", "codec").Get(ctx, keys[0], &got); err != nil || got.Name != "application/bson"+keys[0].String() {
		t.Fatalf("cross-codec Get = %+v, %v", got, err)
	}
}

// The client's requests carry exactly the addresses the raw API would.
func TestKeysMapToTheAPI(t *testing.T) {
	rec := &capture{}
	srv := sinktest.Start(t)
	c := srv.NewClient(t, client.WithDialOptions(grpc.WithUnaryInterceptor(rec.intercept)))
	ds := c.Dataset("ns", "ds", client.InStore(""))
	oid := bson.NewObjectID()
	for _, k := range []client.Key{client.StringKey("s"), client.Int64Key(9), client.BytesKey([]byte("b")), client.ObjectIDKey(oid)} {
		var v any
		_, _ = ds.Get(context.Background(), k, &v)
	}
	want := []*sinkv1.RecordKey{
		{Kind: &sinkv1.RecordKey_String_{String_: "s"}},
		{Kind: &sinkv1.RecordKey_Int64{Int64: 9}},
		{Kind: &sinkv1.RecordKey_Bytes{Bytes: []byte("b")}},
		{Kind: &sinkv1.RecordKey_ObjectId{ObjectId: oid[:]}},
	}
	if len(rec.keys) != len(want) {
		t.Fatalf("%d requests", len(rec.keys))
	}
	for i := range want {
		if !proto.Equal(rec.keys[i], want[i]) {
			t.Errorf("key %d: %v, want %v", i, rec.keys[i], want[i])
		}
	}
}

type capture struct{ keys []*sinkv1.RecordKey }

func (c *capture) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if r, ok := req.(*sinkv1.ReadRequest); ok {
		c.keys = append(c.keys, r.Operations[0].Address.Key)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// A request the server refuses up front because its deadline leaves too
// little time (SINK_MIN_DEADLINE) did nothing, and the client says so:
// ErrDeadlineExceeded, sent once, never an unknown outcome (the gRPC code
// alone, DEADLINE_EXCEEDED, would not tell it from a call cut off while
// it ran; the server's google.rpc.ErrorInfo reason does).
func TestDeadlineRefusedByTheServerIsNotAnUnknownOutcome(t *testing.T) {
	st := newFaultStore()
	srv := sinktest.Start(t, sinktest.WithStorage(st), sinktest.WithEnv("SINK_MIN_DEADLINE", "1h"))
	for _, keyed := range []bool{false, true} {
		opts := []client.Option{client.WithRetry(5, time.Millisecond, 10*time.Millisecond)}
		if keyed {
			opts = append(opts, client.WithAutoIdempotencyKeys())
		}
		ds := srv.NewClient(t, opts...).Dataset("shop", "orders")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := ds.Put(ctx, client.StringKey("o-1"), order{Customer: "ada", Total: 1})
		cancel()
		var oe *client.OperationError
		if !errors.Is(err, client.ErrDeadlineExceeded) || errors.Is(err, client.ErrOutcomeUnknown) || !errors.As(err, &oe) {
			t.Fatalf("keyed %v: Put = %v, want ErrDeadlineExceeded (nothing was done)", keyed, err)
		}
		if oe.Attempts != 1 || oe.Retryable() {
			t.Fatalf("keyed %v: %#v: want one attempt, not retryable with the same deadline", keyed, oe)
		}
		if arrivals, _ := st.counts("o-1"); arrivals != 0 {
			t.Fatalf("keyed %v: the put reached storage %d times", keyed, arrivals)
		}
	}
}
