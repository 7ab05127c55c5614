package integration_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/countprofile"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// An async Write or Delete returns ACCEPTED with a mutation id once Kafka
// has it; the worker in the same process (all mode) applies it and a Read
// sees the result.
func TestAsyncWriteAndDeleteAllMode(t *testing.T) {
	asyncSkipShort(t)
	forEachTransport(t, 3, testAsyncWriteAndDeleteAllMode)
}

func testAsyncWriteAndDeleteAllMode(t *testing.T, tr *asyncTransport) {
	s := tr.startAll(t, nil)
	c := s.Client

	a, b := addr("shop", "orders", "a"), addr("shop", "orders", "b")
	ids := asyncMustAccept(t, c,
		putOp(a, `{"x":1,"y":{"z":1}}`, sinkv1.PutMode_PUT_MODE_CREATE, nil),
		mergeOp(a, "merge-patch", `{"y":{"z":null,"w":2}}`),
		putOp(b, `{"n":1}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil),
		mergeOp(b, "merge-patch", `{"n":2}`),
	)
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("mutation id %s returned twice", id)
		}
		seen[id] = true
	}
	eventuallyState(t, c, a, `{"x":1,"y":{"w":2}}`, 20*time.Second)
	eventuallyState(t, c, b, `{"n":2}`, 20*time.Second)

	asyncDelete(t, c, a)
	eventuallyState(t, c, a, "absent", 20*time.Second)
	eventuallyState(t, c, b, `{"n":2}`, time.Second)

	// Sync and async requests mix: a synchronous read-your-write still works.
	write(t, c, putOp(a, `{"sync":true}`, sinkv1.PutMode_PUT_MODE_UPSERT, nil))
	if got := readJSON(t, c, a); !jsonEqual(got, `{"sync":true}`) {
		t.Fatalf("sync put read back %s", got)
	}
}

// The server and the worker as two processes (two fx apps) sharing only the
// external storage (a MongoDB-wire server) and Kafka: async Write and
// Delete through the server, applied by the worker, seen by Reads. The
// worker opens no gRPC listener; its health is GET /healthz.
func TestAsyncServerAndWorkerProcesses(t *testing.T) {
	asyncSkipShort(t)
	mongo := mongotest.Private(t)
	brokers := kafkatest.InProcess(t, kafkatest.Topics(asyncTopic, asyncDLT), kafkatest.Partitions(2))
	extra := mongo.SinkEnv()
	server := sinktest.Start(t, asyncEnv(brokers, bootstrap.ModeServer, extra), bootstrap.MergeProfile(countprofile.New))
	worker := asyncStartWorker(t, asyncEnv(brokers, bootstrap.ModeWorker, extra), bootstrap.MergeProfile(countprofile.New))
	c := server.Client
	ns := mongotest.DatabaseName(t)

	bsonDoc := func(v any) *sinkv1.Document {
		d, err := countprofile.Encode(domain.ContentTypeBSON, v)
		if err != nil {
			t.Fatal(err)
		}
		return &sinkv1.Document{ContentType: d.ContentType, Data: d.Data}
	}
	a, b := addr(ns, "counters", "a"), addr(ns, "counters", "b")
	merge := func(target *sinkv1.RecordAddress, id string) *sinkv1.WriteOperation {
		return &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{
			Address: target, Profile: countprofile.Name, Intent: bsonDoc(countprofile.Intent{Add: 1, ID: id})}}}
	}
	asyncMustAccept(t, c,
		&sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{Address: a, Document: bsonDoc(countprofile.Counter{N: 10, IDs: []string{"seed"}})}}},
		merge(a, "x"), merge(a, "y"), merge(b, "z"))
	counter := func(target *sinkv1.RecordAddress) (countprofile.Counter, sinkv1.OperationStatus) {
		r := read(t, c, target)[0]
		var got countprofile.Counter
		if r.GetStatus() == found {
			if err := countprofile.Decode(domain.Document{ContentType: r.GetDocument().GetContentType(), Data: r.GetDocument().GetData()}, &got); err != nil {
				t.Fatal(err)
			}
		}
		return got, r.GetStatus()
	}
	eventually(t, 30*time.Second, "the worker to apply the writes", func() (bool, string) {
		ga, _ := counter(a)
		gb, _ := counter(b)
		return ga.N == 12 && fmt.Sprint(ga.IDs) == "[seed x y]" && gb.N == 1, fmt.Sprintf("a=%+v b=%+v", ga, gb)
	})
	asyncDelete(t, c, a)
	eventually(t, 30*time.Second, "the worker to apply the delete", func() (bool, string) {
		_, st := counter(a)
		return st == notFound, st.String()
	})
	if got, st := counter(b); st != found || got.N != 1 {
		t.Fatalf("b = %+v (%v)", got, st)
	}

	hc := worker.http.Addr()
	if hc == nil {
		t.Fatal("the worker has no HTTP endpoint")
	}
	code, body := httpGetQuiet("http://" + hc.String() + "/healthz")
	if code != 200 || !strings.Contains(body, `"SERVING"`) {
		t.Fatalf("worker /healthz: %d %s", code, body)
	}
}
