package integration_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// dialSink returns a plaintext client of the Sink service at addr, closed
// when the test ends.
func dialSink(t testing.TB, addr string) sinkv1.SinkClient {
	t.Helper()
	return sinkv1.NewSinkClient(dialConn(t, addr))
}

// dialConn returns a plaintext connection to addr, closed when the test
// ends.
func dialConn(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func addr(ns, ds, key string) *sinkv1.RecordAddress {
	return &sinkv1.RecordAddress{Namespace: ns, Dataset: ds, Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: key}}}
}

func jsonDoc(v string) *sinkv1.Document {
	return &sinkv1.Document{ContentType: domain.ContentTypeJSON, Data: []byte(v)}
}

func putOp(a *sinkv1.RecordAddress, doc string, mode sinkv1.PutMode, rev []byte) *sinkv1.WriteOperation {
	return &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{Address: a, Document: jsonDoc(doc), Mode: mode, ExpectedRevision: rev}}}
}

func mergeOp(a *sinkv1.RecordAddress, profile, intent string) *sinkv1.WriteOperation {
	return &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{Address: a, Profile: profile, Intent: jsonDoc(intent)}}}
}

func write(t testing.TB, c sinkv1.SinkClient, ops ...*sinkv1.WriteOperation) []*sinkv1.WriteResult {
	t.Helper()
	resp, err := c.Write(ctx(t), &sinkv1.WriteRequest{Operations: ops})
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if len(resp.Results) != len(ops) {
		t.Fatalf("Write returned %d results for %d operations", len(resp.Results), len(ops))
	}
	for i, r := range resp.Results {
		if int(r.Index) != i {
			t.Fatalf("result %d has index %d", i, r.Index)
		}
	}
	return resp.Results
}

func read(t testing.TB, c sinkv1.SinkClient, addrs ...*sinkv1.RecordAddress) []*sinkv1.ReadResult {
	t.Helper()
	req := &sinkv1.ReadRequest{}
	for _, a := range addrs {
		req.Operations = append(req.Operations, &sinkv1.ReadOperation{Address: a})
	}
	resp, err := c.Read(ctx(t), req)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if len(resp.Results) != len(addrs) {
		t.Fatalf("Read returned %d results for %d operations", len(resp.Results), len(addrs))
	}
	return resp.Results
}

// readJSON returns the record's JSON document, or "" when it is absent.
func readJSON(t testing.TB, c sinkv1.SinkClient, a *sinkv1.RecordAddress) string {
	t.Helper()
	r := read(t, c, a)[0]
	switch r.Status {
	case sinkv1.OperationStatus_OPERATION_STATUS_FOUND:
		return string(r.Document.Data)
	case sinkv1.OperationStatus_OPERATION_STATUS_NOT_FOUND:
		return ""
	default:
		t.Fatalf("read %v: %v %v", a, r.Status, r.Error)
		return ""
	}
}

func expectApplied(t testing.TB, what string, r *sinkv1.WriteResult) {
	t.Helper()
	if r.Status != sinkv1.OperationStatus_OPERATION_STATUS_APPLIED || r.Error != nil || len(r.Revision) == 0 {
		t.Fatalf("%s: status %v error %v revision %q, want APPLIED with a revision", what, r.Status, r.Error, r.Revision)
	}
}

// expectFailure checks status, gRPC code, retryability and message fragments.
func expectFailure(t testing.TB, what string, status sinkv1.OperationStatus, e *sinkv1.OperationError, wantStatus sinkv1.OperationStatus, code uint32, fragments ...string) {
	t.Helper()
	if status != wantStatus || e == nil {
		t.Fatalf("%s: status %v error %v, want %v with an error", what, status, e, wantStatus)
	}
	if e.Code != code {
		t.Fatalf("%s: code %d (%s), want %d: %s", what, e.Code, e.Reason, code, e.Message)
	}
	for _, f := range fragments {
		if !strings.Contains(e.Message, f) {
			t.Fatalf("%s: message %q does not mention %q", what, e.Message, f)
		}
	}
}

type counter struct {
	N   int      `json:"n"`
	IDs []string `json:"ids,omitempty"`
}

func decodeCounter(t testing.TB, s string) counter {
	t.Helper()
	var c counter
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return c
}

// countingProfile adds the intent's "add" to "n": a merge that is not
// idempotent, so lost or doubled updates show.
type countingProfile struct{}

func (countingProfile) Name() string           { return "count" }
func (countingProfile) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (countingProfile) Merge(_ context.Context, input ports.MergeInput) (domain.Document, error) {
	cur, intent := input.Current, input.Intent
	var c counter
	if cur != nil {
		if err := json.Unmarshal(cur.Data, &c); err != nil {
			return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "current document: %v", err)
		}
	}
	var in struct {
		Add int    `json:"add"`
		ID  string `json:"id"`
	}
	if err := json.Unmarshal(intent.Data, &in); err != nil {
		return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "intent: %v", err)
	}
	c.N += in.Add
	if in.ID != "" {
		c.IDs = append(c.IDs, in.ID)
	}
	b, _ := json.Marshal(c)
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: b}, nil
}

func newCountingProfile() countingProfile { return countingProfile{} }
