package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"

	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// captureClient answers every call APPLIED and keeps the requests.
type captureClient struct {
	sinkv1.SinkClient
	writes  []*sinkv1.WriteRequest
	deletes []*sinkv1.DeleteRequest
}

func (c *captureClient) Write(_ context.Context, r *sinkv1.WriteRequest, _ ...grpc.CallOption) (*sinkv1.WriteResponse, error) {
	c.writes = append(c.writes, r)
	return &sinkv1.WriteResponse{Results: []*sinkv1.WriteResult{{Status: sinkv1.OperationStatus_OPERATION_STATUS_ACCEPTED, MutationId: "x"}}}, nil
}

func (c *captureClient) Delete(_ context.Context, r *sinkv1.DeleteRequest, _ ...grpc.CallOption) (*sinkv1.DeleteResponse, error) {
	c.deletes = append(c.deletes, r)
	return &sinkv1.DeleteResponse{Results: []*sinkv1.DeleteResult{{Status: sinkv1.OperationStatus_OPERATION_STATUS_APPLIED}}}, nil
}

func runCaptured(t *testing.T, client *captureClient, args ...string) int {
	t.Helper()
	var out, errb bytes.Buffer
	c := &command{name: args[0], io: IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}}
	c.define()
	if err := c.fs.Parse(args[1:]); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	req, code := c.build()
	if code != ExitOK {
		t.Fatalf("%v: exit %d: %s", args, code, errb.String())
	}
	return c.call(context.Background(), client, req)
}

// --idempotency-key is sent as the operation's idempotency_key by put,
// merge and delete; read has no such flag.
func TestIdempotencyKeyFlag(t *testing.T) {
	cl := &captureClient{}
	base := []string{"-n", "shop", "-d", "orders", "--key", "o-1", "--idempotency-key", "pay-o-1"}
	for _, cmd := range []string{"put", "merge"} {
		if code := runCaptured(t, cl, append(append([]string{cmd}, base...), "--data", `{"paid":true}`, "--async")...); code != ExitOK {
			t.Fatalf("%s: exit %d", cmd, code)
		}
	}
	if code := runCaptured(t, cl, append([]string{"delete"}, base...)...); code != ExitOK {
		t.Fatalf("delete: exit %d", code)
	}
	if got := cl.writes[0].GetOperations()[0].GetPut().GetIdempotencyKey(); got != "pay-o-1" {
		t.Fatalf("put key %q", got)
	}
	if got := cl.writes[1].GetOperations()[0].GetMerge().GetIdempotencyKey(); got != "pay-o-1" {
		t.Fatalf("merge key %q", got)
	}
	if got := cl.deletes[0].GetOperations()[0].GetIdempotencyKey(); got != "pay-o-1" {
		t.Fatalf("delete key %q", got)
	}
	if code := runCaptured(t, cl, "merge", "-n", "shop", "-d", "orders", "--key", "o-1", "--data", `{}`); code != ExitOK ||
		cl.writes[2].GetOperations()[0].GetMerge().GetIdempotencyKey() != "" {
		t.Fatalf("without the flag: exit %d, key %q", code, cl.writes[2].GetOperations()[0].GetMerge().GetIdempotencyKey())
	}
	if code, _, _ := sink(t, "", "read", "-n", "s", "-d", "o", "--key", "k", "--idempotency-key", "x"); code != ExitUsage {
		t.Fatalf("read --idempotency-key: exit %d, want usage", code)
	}
}

// --return-document asks put and merge for the written document and
// prints it; with --async it is a usage error (nothing sent).
func TestReturnDocumentFlag(t *testing.T) {
	cl := &docClient{}
	base := []string{"-n", "shop", "-d", "orders", "--key", "o-1", "--data", `{"paid":true}`}
	for _, cmd := range []string{"put", "merge"} {
		out, code := runCapturedOut(t, cl, append(append([]string{cmd}, base...), "--return-document")...)
		if code != ExitOK || !strings.Contains(out, `"document": {`) || !strings.Contains(out, `"merged": true`) {
			t.Fatalf("%s --return-document: exit %d, output %s", cmd, code, out)
		}
	}
	if !cl.writes[0].GetOperations()[0].GetPut().GetReturnDocument() || !cl.writes[1].GetOperations()[0].GetMerge().GetReturnDocument() {
		t.Fatalf("return_document not sent: %v", cl.writes)
	}
	if _, code := runCapturedOut(t, cl, append([]string{"put"}, base...)...); code != ExitOK || cl.writes[2].GetOperations()[0].GetPut().GetReturnDocument() {
		t.Fatalf("without the flag: exit %d, %v", code, cl.writes[2])
	}
	if code, _, _ := sink(t, "", append([]string{"merge"}, append(base, "--return-document", "--async")...)...); code != ExitUsage {
		t.Fatalf("--return-document --async: exit %d, want usage", code)
	}
}

// docClient answers every write APPLIED with a document.
type docClient struct {
	sinkv1.SinkClient
	writes []*sinkv1.WriteRequest
}

func (c *docClient) Write(_ context.Context, r *sinkv1.WriteRequest, _ ...grpc.CallOption) (*sinkv1.WriteResponse, error) {
	c.writes = append(c.writes, r)
	res := &sinkv1.WriteResult{Status: sinkv1.OperationStatus_OPERATION_STATUS_APPLIED, Revision: []byte{1}}
	if op := r.GetOperations()[0]; op.GetPut().GetReturnDocument() || op.GetMerge().GetReturnDocument() {
		res.Document = &sinkv1.Document{ContentType: "application/json", Data: []byte(`{"paid":true,"merged":true}`)}
	}
	return &sinkv1.WriteResponse{Results: []*sinkv1.WriteResult{res}}, nil
}

func runCapturedOut(t *testing.T, client sinkv1.SinkClient, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &command{name: args[0], io: IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}}
	c.define()
	if err := c.fs.Parse(args[1:]); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	req, code := c.build()
	if code != ExitOK {
		t.Fatalf("%v: exit %d: %s", args, code, errb.String())
	}
	code = c.call(context.Background(), client, req)
	return out.String(), code
}
