package client_test

import (
	"context"
	"encoding/json"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sink-io/sink/client"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
	"github.com/sink-io/sink/sinktest"
)

// BenchmarkPutGet compares the client's typed Put and Get with the raw
// generated stubs (with the same encoding/json work) against one
// in-process server: a put then a get of one record per iteration.
func BenchmarkPutGet(b *testing.B) {
	srv := sinktest.Start(b)
	ctx := context.Background()
	v := order{Customer: "ada", Total: 12}

	b.Run("raw", func(b *testing.B) {
		conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		stub := sinkv1.NewSinkClient(conn)
		b.ReportAllocs()
		for b.Loop() {
			// Addresses built per call, as a caller of the stubs does.
			addr := &sinkv1.RecordAddress{Namespace: "bench", Dataset: "raw", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: "k"}}}
			data, err := json.Marshal(v)
			if err != nil {
				b.Fatal(err)
			}
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
	})
	for _, tc := range []struct {
		name string
		opts []client.Option
	}{{"client", nil}, {"client-untraced", []client.Option{client.WithoutCallTracing()}}} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := srv.Client(tc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ds := c.Dataset("bench", "client")
			key := client.StringKey("k")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ds.Put(ctx, key, v); err != nil {
					b.Fatal(err)
				}
				var got order
				if _, err := ds.Get(ctx, key, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
