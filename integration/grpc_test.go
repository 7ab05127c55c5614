package integration_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	"github.com/sink-io/sink/ports"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

const (
	applied      = sinkv1.OperationStatus_OPERATION_STATUS_APPLIED
	found        = sinkv1.OperationStatus_OPERATION_STATUS_FOUND
	notFound     = sinkv1.OperationStatus_OPERATION_STATUS_NOT_FOUND
	precondition = sinkv1.OperationStatus_OPERATION_STATUS_PRECONDITION_FAILED
	failedStatus = sinkv1.OperationStatus_OPERATION_STATUS_FAILED
)

func TestPutReadDeleteRoundTrip(t *testing.T) {
	s := sinktest.Start(t, nil)
	a := addr("shop", "orders", "o-1")
	r := write(t, s.Client, putOp(a, `{"total":10}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))[0]
	expectApplied(t, "put", r)

	got := read(t, s.Client, a, addr("shop", "orders", "missing"))
	if got[0].Status != found || string(got[0].Document.Data) != `{"total":10}` || got[0].Document.ContentType != domain.ContentTypeJSON {
		t.Fatalf("read: %+v", got[0])
	}
	if !bytes.Equal(got[0].Revision, r.Revision) {
		t.Fatalf("read revision %q, write revision %q", got[0].Revision, r.Revision)
	}
	if got[1].Status != notFound || got[1].Error != nil || got[1].Index != 1 {
		t.Fatalf("missing record: %+v", got[1])
	}

	del, err := s.Client.Delete(ctx(t), &sinkv1.DeleteRequest{Operations: []*sinkv1.DeleteOperation{{Address: a}, {Address: a}}})
	if err != nil {
		t.Fatal(err)
	}
	if del.Results[0].Status != applied || del.Results[0].Error != nil {
		t.Fatalf("delete: %+v", del.Results[0])
	}
	if del.Results[1].Status != notFound || del.Results[1].Error != nil {
		t.Fatalf("deleting an absent record must say NOT_FOUND without an error: %+v", del.Results[1])
	}
	if readJSON(t, s.Client, a) != "" {
		t.Fatal("record still there after delete")
	}
}

func TestEveryKeyKind(t *testing.T) {
	s := sinktest.Start(t, nil)
	keys := []*sinkv1.RecordKey{
		{Kind: &sinkv1.RecordKey_String_{String_: "1"}},
		{Kind: &sinkv1.RecordKey_Int64{Int64: 1}},
		{Kind: &sinkv1.RecordKey_Bytes{Bytes: []byte("1")}},
		{Kind: &sinkv1.RecordKey_ObjectId{ObjectId: bytes.Repeat([]byte{1}, 12)}},
	}
	var ops []*sinkv1.WriteOperation
	var addrs []*sinkv1.RecordAddress
	for i, k := range keys {
		a := &sinkv1.RecordAddress{Namespace: "n", Dataset: "d", Key: k}
		addrs = append(addrs, a)
		ops = append(ops, putOp(a, fmt.Sprintf(`{"i":%d}`, i), sinkv1.PutMode_PUT_MODE_CREATE, nil))
	}
	for i, r := range write(t, s.Client, ops...) {
		expectApplied(t, fmt.Sprintf("create key %d", i), r)
	}
	for i, r := range read(t, s.Client, addrs...) {
		if r.Status != found || string(r.Document.Data) != fmt.Sprintf(`{"i":%d}`, i) {
			t.Fatalf("key %d: %+v", i, r)
		}
	}
}

func TestPutModesAndRevisions(t *testing.T) {
	s := sinktest.Start(t, nil)
	a := addr("n", "d", "k")
	first := write(t, s.Client, putOp(a, `{"v":1}`, sinkv1.PutMode_PUT_MODE_CREATE, nil))[0]
	expectApplied(t, "create", first)

	res := write(t, s.Client,
		putOp(a, `{"v":2}`, sinkv1.PutMode_PUT_MODE_CREATE, nil),
		putOp(addr("n", "d", "absent"), `{"v":3}`, sinkv1.PutMode_PUT_MODE_REPLACE, nil),
		putOp(a, `{"v":4}`, sinkv1.PutMode_PUT_MODE_REPLACE, first.Revision),
		putOp(a, `{"v":5}`, sinkv1.PutMode_PUT_MODE_UPSERT, first.Revision),
	)
	expectFailure(t, "create on existing", res[0].Status, res[0].Error, precondition, uint32(codes.AlreadyExists))
	expectFailure(t, "replace on absent", res[1].Status, res[1].Error, notFound, uint32(codes.NotFound))
	expectApplied(t, "replace with the right revision", res[2])
	expectFailure(t, "stale revision", res[3].Status, res[3].Error, precondition, uint32(codes.FailedPrecondition))
	if res[3].Error.Reason != "REVISION_MISMATCH" || res[3].Error.Retryable {
		t.Fatalf("stale revision error: %+v", res[3].Error)
	}
	if got := readJSON(t, s.Client, a); got != `{"v":4}` {
		t.Fatalf("document = %s", got)
	}
	if readJSON(t, s.Client, addr("n", "d", "absent")) != "" {
		t.Fatal("failed REPLACE created a record")
	}

	del, err := s.Client.Delete(ctx(t), &sinkv1.DeleteRequest{Operations: []*sinkv1.DeleteOperation{
		{Address: a, ExpectedRevision: first.Revision},
		{Address: a, ExpectedRevision: res[2].Revision},
	}})
	if err != nil {
		t.Fatal(err)
	}
	expectFailure(t, "delete with stale revision", del.Results[0].Status, del.Results[0].Error, precondition, uint32(codes.FailedPrecondition))
	if del.Results[1].Status != applied {
		t.Fatalf("delete with the right revision: %+v", del.Results[1])
	}
}

func TestMergePatch(t *testing.T) {
	s := sinktest.Start(t, nil)
	a := addr("users", "profiles", "u1")
	res := write(t, s.Client,
		mergeOp(a, "merge-patch", `{"name":"Ada","tags":["x"],"address":{"city":"Paris","zip":"75001"}}`),
		mergeOp(a, "merge-patch", `{"address":{"zip":null,"street":"Rue A"},"age":36}`),
		mergeOp(a, "merge-patch", `{"tags":null}`),
	)
	for i, r := range res {
		expectApplied(t, fmt.Sprintf("merge %d", i), r)
	}
	want := `{"name":"Ada","address":{"city":"Paris","street":"Rue A"},"age":36}`
	if got := readJSON(t, s.Client, a); got != want {
		t.Fatalf("after merges: %s\nwant %s", got, want)
	}
}

func TestSameRecordOperationsRunInRequestOrder(t *testing.T) {
	s := sinktest.Start(t, nil, bootstrap.MergeProfile(newCountingProfile))
	a, b := addr("n", "d", "a"), addr("n", "d", "b")
	res := write(t, s.Client,
		putOp(a, `{"n":1}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil),   // 0
		mergeOp(a, "count", `{"add":10}`),                          // 1 -> 11
		putOp(b, `{"n":100}`, sinkv1.PutMode_PUT_MODE_CREATE, nil), // 2
		putOp(a, `{"n":5}`, sinkv1.PutMode_PUT_MODE_CREATE, nil),   // 3 fails: exists
		mergeOp(a, "count", `{"add":2}`),                           // 4 -> 13
		mergeOp(b, "count", `{"add":1}`),                           // 5 -> 101
		putOp(a, `{"n":0}`, sinkv1.PutMode_PUT_MODE_REPLACE, nil),  // 6 -> 0
		mergeOp(a, "count", `{"add":7}`),                           // 7 -> 7
	)
	for _, i := range []int{0, 1, 2, 4, 5, 6, 7} {
		expectApplied(t, fmt.Sprintf("op %d", i), res[i])
	}
	expectFailure(t, "op 3", res[3].Status, res[3].Error, precondition, uint32(codes.AlreadyExists))
	if c := decodeCounter(t, readJSON(t, s.Client, a)); c.N != 7 {
		t.Fatalf("a.n = %d, want 7", c.N)
	}
	if c := decodeCounter(t, readJSON(t, s.Client, b)); c.N != 101 {
		t.Fatalf("b.n = %d, want 101", c.N)
	}
}

func TestConcurrentMergesLoseNoUpdate(t *testing.T) {
	s := sinktest.Start(t, nil, bootstrap.MergeProfile(newCountingProfile))
	a := addr("n", "d", "counter")
	const clients, merges = 16, 50
	var wg sync.WaitGroup
	errs := make(chan string, clients*merges)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < merges; i++ {
				resp, err := s.Client.Write(context.Background(), &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{mergeOp(a, "count", `{"add":1}`)}})
				if err != nil {
					errs <- err.Error()
					return
				}
				if r := resp.Results[0]; r.Status != applied {
					errs <- fmt.Sprintf("%v %v", r.Status, r.Error)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if c := decodeCounter(t, readJSON(t, s.Client, a)); c.N != clients*merges {
		t.Fatalf("counter = %d, want %d (lost updates)", c.N, clients*merges)
	}
}

func TestPartialFailureDoesNotFailOtherOperations(t *testing.T) {
	s := sinktest.Start(t, nil)
	ops := []*sinkv1.WriteOperation{
		putOp(addr("n", "d", "ok-1"), `{}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil),
		putOp(addr("n", "", "bad"), `{}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil),
		mergeOp(addr("n", "d", "ok-2"), "no-such-profile", `{}`),
		putOp(addr("n", "d", "ok-3"), `{}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil),
	}
	res := write(t, s.Client, ops...)
	expectApplied(t, "op 0", res[0])
	expectFailure(t, "op 1", res[1].Status, res[1].Error, failedStatus, uint32(codes.InvalidArgument), "operations[1]", "address.dataset")
	expectFailure(t, "op 2", res[2].Status, res[2].Error, failedStatus, uint32(codes.InvalidArgument), "operations[2]", `unknown merge profile "no-such-profile"`, "merge-patch")
	expectApplied(t, "op 3", res[3])
	if readJSON(t, s.Client, addr("n", "d", "ok-2")) != "" {
		t.Fatal("failed merge wrote a record")
	}
}

// Every bad-input class gets its specific error and writes nothing.
func TestBadInputGetsSpecificErrorsAndWritesNothing(t *testing.T) {
	s := sinktest.Start(t, map[string]string{
		"SINK_MAX_DOCUMENT_BYTES": "1024", "SINK_MAX_KEY_BYTES": "16", "SINK_MAX_NAME_LENGTH": "10",
	})
	key := func(k *sinkv1.RecordKey) *sinkv1.RecordAddress {
		return &sinkv1.RecordAddress{Namespace: "n", Dataset: "d", Key: k}
	}
	skey := func(s string) *sinkv1.RecordKey {
		return &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: s}}
	}
	put := func(a *sinkv1.RecordAddress, d *sinkv1.Document, mode sinkv1.PutMode, rev []byte) *sinkv1.WriteOperation {
		return &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{Address: a, Document: d, Mode: mode, ExpectedRevision: rev}}}
	}
	good := jsonDoc(`{}`)
	cases := []struct {
		name      string
		op        *sinkv1.WriteOperation
		fragments []string
	}{
		{"unknown store", put(&sinkv1.RecordAddress{Store: "other", Namespace: "n", Dataset: "d", Key: skey("k1")}, good, 0, nil), []string{"address.store", `"other"`, `serves "primary"`}},
		{"empty namespace", put(&sinkv1.RecordAddress{Dataset: "d", Key: skey("k2")}, good, 0, nil), []string{"address.namespace", "must not be empty"}},
		{"long dataset", put(&sinkv1.RecordAddress{Namespace: "n", Dataset: "abcdefghijk", Key: skey("k3")}, good, 0, nil), []string{"address.dataset", "limit is 10"}},
		{"control character", put(&sinkv1.RecordAddress{Namespace: "n\x01", Dataset: "d", Key: skey("k4")}, good, 0, nil), []string{"address.namespace", "control characters"}},
		{"missing key", put(&sinkv1.RecordAddress{Namespace: "n", Dataset: "d"}, good, 0, nil), []string{"address.key", "must be set"}},
		{"empty string key", put(key(skey("")), good, 0, nil), []string{"address.key.string", "must not be empty"}},
		{"long key", put(key(skey(strings.Repeat("k", 17))), good, 0, nil), []string{"address.key.string", "17 bytes", "limit is 16"}},
		{"empty bytes key", put(key(&sinkv1.RecordKey{Kind: &sinkv1.RecordKey_Bytes{}}), good, 0, nil), []string{"address.key.bytes", "must not be empty"}},
		{"short object id", put(key(&sinkv1.RecordKey{Kind: &sinkv1.RecordKey_ObjectId{ObjectId: []byte{1, 2}}}), good, 0, nil), []string{"address.key.object_id", "exactly 12 bytes, got 2"}},
		{"missing content type", put(key(skey("k5")), &sinkv1.Document{Data: []byte("{}")}, 0, nil), []string{"document.content_type", "must not be empty"}},
		{"bad content type", put(key(skey("k6")), &sinkv1.Document{ContentType: "json", Data: []byte("{}")}, 0, nil), []string{"document.content_type", "media type"}},
		{"oversized document", put(key(skey("k7")), jsonDoc(`"`+strings.Repeat("x", 1100)+`"`), 0, nil), []string{"document.data", "limit is 1024"}},
		{"create with revision", put(key(skey("k8")), good, sinkv1.PutMode_PUT_MODE_CREATE, []byte("1")), []string{"expected_revision", "CREATE"}},
		{"unknown put mode", put(key(skey("k9")), good, 7, nil), []string{"mode", "unknown put mode 7"}},
		{"no operation kind", &sinkv1.WriteOperation{}, []string{"kind", "put or merge"}},
		{"merge without profile", mergeOp(key(skey("k10")), "", `{}`), []string{"profile", "must name a merge profile", "merge-patch"}},
		{"unknown profile", mergeOp(key(skey("k11")), "nope", `{}`), []string{"profile", `"nope"`}},
		{"intent content type", &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{Address: key(skey("k12")), Profile: "merge-patch", Intent: &sinkv1.Document{ContentType: "text/plain", Data: []byte("x")}}}}, []string{"intent.content_type", "text/plain", "application/json"}},
		{"invalid JSON intent", mergeOp(key(skey("k13")), "merge-patch", `{"a":`), []string{"intent.data", "not valid JSON", "byte 5 (line 1, column 6)"}},
		{"invalid JSON document", put(key(skey("k14")), jsonDoc(`{"a":`), 0, nil), []string{"document.data", "not valid JSON", "byte 5"}},
		{"JSON labelled BSON", put(key(skey("k15")), &sinkv1.Document{ContentType: "application/bson", Data: []byte(`{"a":1}`)}, 0, nil), []string{"document.data", "not valid BSON"}},
	}
	for i, c := range cases {
		res := write(t, s.Client, c.op)[0]
		expectFailure(t, c.name, res.Status, res.Error, failedStatus, uint32(codes.InvalidArgument), c.fragments...)
		if res.Error.Retryable {
			t.Fatalf("%s: invalid input must not be retryable", c.name)
		}
		_ = i
	}
	// Nothing was written by any of them.
	for i := 1; i <= 15; i++ {
		if got := readJSON(t, s.Client, addr("n", "d", fmt.Sprintf("k%d", i))); got != "" {
			t.Fatalf("k%d was written: %s", i, got)
		}
	}
}

func TestWholeRequestErrors(t *testing.T) {
	s := sinktest.Start(t, map[string]string{"SINK_MAX_OPERATIONS": "3", "SINK_MAX_REQUEST_BYTES": "4096", "SINK_MAX_DOCUMENT_BYTES": "4096"})
	expectCode := func(name string, err error, code codes.Code, fragment string) {
		t.Helper()
		st, _ := status.FromError(err)
		if st.Code() != code || !strings.Contains(st.Message(), fragment) {
			t.Fatalf("%s: %v, want %v mentioning %q", name, err, code, fragment)
		}
	}
	_, err := s.Client.Write(ctx(t), &sinkv1.WriteRequest{})
	expectCode("empty write", err, codes.InvalidArgument, "no operations")
	_, err = s.Client.Read(ctx(t), &sinkv1.ReadRequest{})
	expectCode("empty read", err, codes.InvalidArgument, "no operations")
	_, err = s.Client.Delete(ctx(t), &sinkv1.DeleteRequest{})
	expectCode("empty delete", err, codes.InvalidArgument, "no operations")

	var ops []*sinkv1.WriteOperation
	for i := 0; i < 4; i++ {
		ops = append(ops, putOp(addr("n", "d", fmt.Sprint(i)), `{}`, 0, nil))
	}
	_, err = s.Client.Write(ctx(t), &sinkv1.WriteRequest{Operations: ops})
	expectCode("too many operations", err, codes.InvalidArgument, "4 operations; the limit is 3")

	big := strings.Repeat("x", 1500)
	ops = []*sinkv1.WriteOperation{
		putOp(addr("n", "d", "a"), `"`+big+`"`, 0, nil), putOp(addr("n", "d", "b"), `"`+big+`"`, 0, nil), putOp(addr("n", "d", "c"), `"`+big+`"`, 0, nil),
	}
	_, err = s.Client.Write(ctx(t), &sinkv1.WriteRequest{Operations: ops})
	expectCode("request too large", err, codes.ResourceExhausted, "limit is 4096")

	_, err = s.Client.Write(ctx(t), &sinkv1.WriteRequest{Operations: ops[:1], Completion: sinkv1.CompletionMode_COMPLETION_MODE_RETURN_AFTER_ACCEPTED})
	expectCode("async without queue", err, codes.FailedPrecondition, "SINK_KAFKA_BROKERS and SINK_KAFKA_TOPIC")
	_, err = s.Client.Delete(ctx(t), &sinkv1.DeleteRequest{Operations: []*sinkv1.DeleteOperation{{Address: addr("n", "d", "a")}}, Completion: sinkv1.CompletionMode_COMPLETION_MODE_RETURN_AFTER_ACCEPTED})
	expectCode("async delete without queue", err, codes.FailedPrecondition, "RETURN_AFTER_ACCEPTED")
	_, err = s.Client.Write(ctx(t), &sinkv1.WriteRequest{Operations: ops[:1], Completion: 9})
	expectCode("unknown completion", err, codes.InvalidArgument, "completion")

	for _, k := range []string{"a", "b", "c"} {
		if readJSON(t, s.Client, addr("n", "d", k)) != "" {
			t.Fatalf("%s was written by a rejected request", k)
		}
	}
}

func TestHealthAndReflection(t *testing.T) {
	s := sinktest.Start(t, nil)
	h := healthpb.NewHealthClient(s.Conn)
	for _, svc := range []string{"", "sink.v1.Sink"} {
		resp, err := h.Check(ctx(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, resp, err)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(s.Conn).ServerReflectionInfo(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		names = append(names, svc.Name)
	}
	joined := strings.Join(names, ",")
	for _, want := range []string{"sink.v1.Sink", "grpc.health.v1.Health"} {
		if !strings.Contains(joined, want) {
			t.Fatalf("reflection lists %v, missing %s", names, want)
		}
	}
}

// blockingProfile holds every merge until release is closed.
type blockingProfile struct {
	entered chan struct{}
	release chan struct{}
}

func (blockingProfile) Name() string           { return "block" }
func (blockingProfile) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (p blockingProfile) Merge(_ context.Context, in ports.MergeInput) (domain.Document, error) {
	intent := in.Intent
	p.entered <- struct{}{}
	<-p.release
	return intent, nil
}

func TestGracefulShutdownDrainsInFlightRPCs(t *testing.T) {
	p := blockingProfile{entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := sinktest.Start(t, nil, bootstrap.MergeProfile(func() blockingProfile { return p }))
	a := addr("n", "d", "slow")
	type outcome struct {
		resp *sinkv1.WriteResponse
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		resp, err := s.Client.Write(context.Background(), &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{mergeOp(a, "block", `{"x":1}`)}})
		done <- outcome{resp, err}
	}()
	<-p.entered // the RPC is in flight
	stopped := make(chan error, 1)
	go func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- s.App.Stop(c)
	}()
	// While draining, new connections are refused but the in-flight RPC lives on.
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned while an RPC was in flight: %v", err)
	case o := <-done:
		t.Fatalf("in-flight RPC ended before it was released: %v %v", o.resp, o.err)
	case <-time.After(200 * time.Millisecond):
	}
	close(p.release)
	o := <-done
	if o.err != nil || o.resp.Results[0].Status != applied {
		t.Fatalf("in-flight RPC was not drained: %v %v", o.resp, o.err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	s.App = nil
}

// A client watching health must not hold the shutdown open.
func TestShutdownIsNotHeldByHealthWatchers(t *testing.T) {
	s := sinktest.Start(t, nil)
	watch, err := healthpb.NewHealthClient(s.Conn).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.App.Stop(c); err != nil {
		t.Fatalf("Stop with an open health watch: %v", err)
	}
	s.App = nil
}
