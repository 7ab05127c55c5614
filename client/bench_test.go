package client_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sink-io/sink/client"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
	"github.com/sink-io/sink/sinktest"
)

// BenchmarkPutGet compares the client's typed Put and Get with the raw
// generated stubs (doing the same encoding/json work) against one
// in-process server: a put then a get of one record per iteration.
func BenchmarkPutGet(b *testing.B) {
	srv := sinktest.Start(b)
	v := order{Customer: "ada", Total: 12}
	rawStub := func(b *testing.B) sinkv1.SinkClient {
		conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		return sinkv1.NewSinkClient(conn)
	}
	dataset := func(b *testing.B, opts ...client.Option) *client.Dataset {
		c, err := srv.Client(opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		return c.Dataset("bench", "client")
	}

	b.Run("raw", func(b *testing.B) {
		stub := rawStub(b)
		b.ReportAllocs()
		for b.Loop() {
			rawPutGet(b, stub, v)
		}
	})
	b.Run("client", func(b *testing.B) {
		ds := dataset(b)
		b.ReportAllocs()
		for b.Loop() {
			clientPutGet(b, ds, v)
		}
	})
	b.Run("client-untraced", func(b *testing.B) {
		ds := dataset(b, client.WithoutCallTracing())
		b.ReportAllocs()
		for b.Loop() {
			clientPutGet(b, ds, v)
		}
	})
	// paired does a raw and a client put+get in every iteration (each
	// first in turn), so that the varying load of a shared machine weighs
	// on both alike, and reports each one's mean and their ratio.
	b.Run("paired", func(b *testing.B) {
		stub, ds := rawStub(b), dataset(b)
		var raw, typed time.Duration
		n := 0
		for b.Loop() {
			n++
			t0 := time.Now()
			if n%2 == 0 {
				rawPutGet(b, stub, v)
				t1 := time.Now()
				clientPutGet(b, ds, v)
				raw, typed = raw+t1.Sub(t0), typed+time.Since(t1)
			} else {
				clientPutGet(b, ds, v)
				t1 := time.Now()
				rawPutGet(b, stub, v)
				typed, raw = typed+t1.Sub(t0), raw+time.Since(t1)
			}
		}
		b.ReportMetric(float64(raw.Nanoseconds())/float64(n), "raw-ns/op")
		b.ReportMetric(float64(typed.Nanoseconds())/float64(n), "client-ns/op")
		b.ReportMetric(float64(typed)/float64(raw), "ratio")
	})
}

func rawPutGet(b *testing.B, stub sinkv1.SinkClient, v order) {
	ctx := context.Background()
	data, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	// Addresses built per call, as a caller of the stubs does.
	addr := &sinkv1.RecordAddress{Namespace: "bench", Dataset: "raw", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: "k"}}}
	w, err := stub.Write(ctx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{
		Address: addr, Document: &sinkv1.Document{ContentType: "application/json", Data: data}}}}}})
	if err != nil || w.Results[0].Status != sinkv1.OperationStatus_OPERATION_STATUS_APPLIED {
		b.Fatal(err, w)
	}
	addr = &sinkv1.RecordAddress{Namespace: "bench", Dataset: "raw", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: "k"}}}
	r, err := stub.Read(ctx, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: addr}}})
	if err != nil || r.Results[0].Status != sinkv1.OperationStatus_OPERATION_STATUS_FOUND {
		b.Fatal(err, r)
	}
	var got order
	if err := json.Unmarshal(r.Results[0].Document.Data, &got); err != nil {
		b.Fatal(err)
	}
}

func clientPutGet(b *testing.B, ds *client.Dataset, v order) {
	ctx := context.Background()
	key := client.StringKey("k")
	if _, err := ds.Put(ctx, key, v); err != nil {
		b.Fatal(err)
	}
	var got order
	if _, err := ds.Get(ctx, key, &got); err != nil {
		b.Fatal(err)
	}
}
