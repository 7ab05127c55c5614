package worksink_test

import (
	"bytes"
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sink-io/sink/internal/testkit/nullsink"
	"github.com/sink-io/sink/internal/testkit/worksink"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

func addr(key string) *sinkv1.RecordAddress {
	return &sinkv1.RecordAddress{Namespace: "ns", Dataset: "ds", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: key}}}
}

func jsonDoc(s string) *sinkv1.Document {
	return &sinkv1.Document{ContentType: "application/json", Data: []byte(s)}
}

func put(key, doc string) *sinkv1.WriteOperation {
	return &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{Address: addr(key), Document: jsonDoc(doc)}}}
}

func merge(key, intent string) *sinkv1.WriteOperation {
	return &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{Address: addr(key), Profile: "merge-patch", Intent: jsonDoc(intent)}}}
}

// The floor does the work it stands for: puts store documents with new
// revisions, merges read, merge and write, reads return what was written,
// deletes remove, and bad input is refused without writing.
func TestFloorDoesTheWork(t *testing.T) {
	ctx := context.Background()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := worksink.New()
	g := nullsink.ServeService(lis, srv)
	defer g.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := sinkv1.NewSinkClient(conn)

	revs := map[string]bool{}
	var w *sinkv1.WriteResponse
	for _, ops := range [][]*sinkv1.WriteOperation{{put("a", `{"x":1}`), put("c", `{}`)}, {merge("a", `{"y":2}`), merge("b", `{"z":3}`)}} {
		var err error
		if w, err = c.Write(ctx, &sinkv1.WriteRequest{Operations: ops}); err != nil {
			t.Fatal(err)
		}
		for i, r := range w.GetResults() {
			if r.GetIndex() != uint32(i) || r.GetStatus() != sinkv1.OperationStatus_OPERATION_STATUS_APPLIED || len(r.GetRevision()) == 0 || revs[string(r.GetRevision())] {
				t.Fatalf("write result %d: %v", i, r)
			}
			revs[string(r.GetRevision())] = true
		}
	}
	rd, err := c.Read(ctx, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: addr("a")}, {Address: addr("b")}, {Address: addr("none")}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{"x":1,"y":2}`, `{"z":3}`, ""}
	for i, r := range rd.GetResults() {
		if got := string(r.GetDocument().GetData()); got != want[i] {
			t.Errorf("read %d: %s, want %s", i, got, want[i])
		}
	}
	if got := rd.GetResults()[2].GetStatus(); got != sinkv1.OperationStatus_OPERATION_STATUS_NOT_FOUND {
		t.Errorf("absent record: %v", got)
	}
	if !bytes.Equal(rd.GetResults()[0].GetRevision(), w.GetResults()[0].GetRevision()) {
		t.Errorf("read revision %q, the merge wrote %q", rd.GetResults()[0].GetRevision(), w.GetResults()[0].GetRevision())
	}
	if _, err := c.Delete(ctx, &sinkv1.DeleteRequest{Operations: []*sinkv1.DeleteOperation{{Address: addr("a")}}}); err != nil {
		t.Fatal(err)
	}
	rd, err = c.Read(ctx, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: addr("a")}}})
	if err != nil || rd.GetResults()[0].GetStatus() != sinkv1.OperationStatus_OPERATION_STATUS_NOT_FOUND {
		t.Fatalf("after the delete: %v %v", rd, err)
	}
	if got := srv.Ops.Load(); got != 4+3+1+1 {
		t.Errorf("%d operations counted, want 9", got)
	}

	badName := &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{Address: &sinkv1.RecordAddress{Namespace: "n\x01", Dataset: "ds", Key: addr("d").Key}, Document: jsonDoc(`{}`)}}}
	for name, ops := range map[string][]*sinkv1.WriteOperation{
		"malformed JSON": {put("d", `{"x":`)},
		"empty key":      {put("", `{}`)},
		"bad intent":     {merge("d", `[1,`)},
		"control char":   {badName},
		"put and merge":  {put("d", `{}`), merge("d", `{"y":1}`)},
	} {
		if _, err := c.Write(ctx, &sinkv1.WriteRequest{Operations: ops}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	rd, err = c.Read(ctx, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: addr("d")}}})
	if err != nil || rd.GetResults()[0].GetStatus() != sinkv1.OperationStatus_OPERATION_STATUS_NOT_FOUND {
		t.Fatalf("refused input wrote: %v %v", rd, err)
	}
}
