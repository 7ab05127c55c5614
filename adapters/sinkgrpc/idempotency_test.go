package sinkgrpc

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// keyQueue accepts every mutation and keeps it.
type keyQueue struct {
	mu  sync.Mutex
	got []domain.Mutation
}

func (q *keyQueue) Submit(_ context.Context, muts []domain.Mutation) []error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.got = append(q.got, muts...)
	return make([]error, len(muts))
}

// counter adds the intent's n to the record's n (not idempotent).
type counter struct{}

func (counter) Name() string           { return "counter" }
func (counter) ContentTypes() []string { return []string{domain.ContentTypeJSON} }
func (counter) Merge(_ context.Context, in ports.MergeInput) (domain.Document, error) {
	n := len(in.Intent.Data)
	if in.Current != nil {
		n += len(in.Current.Data)
	}
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`"` + strings.Repeat("x", n-2) + `"`)}, nil
}

func keyServer(t *testing.T) (*Server, *keyQueue) {
	t.Helper()
	q := &keyQueue{}
	svc, err := application.NewService(application.DefaultConfig(), memory.New(), []ports.MergeProfile{counter{}}, application.WithQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	return NewServer(svc), q
}

func keyAddr() *sinkv1.RecordAddress {
	return &sinkv1.RecordAddress{Namespace: "n", Dataset: "d", Key: &sinkv1.RecordKey{Kind: &sinkv1.RecordKey_String_{String_: "k"}}}
}

func jsonDoc(s string) *sinkv1.Document {
	return &sinkv1.Document{ContentType: domain.ContentTypeJSON, Data: []byte(s)}
}

// The idempotency_key of each operation reaches the application as the
// mutation's ID, marked as a client's key: a synchronous retry gets the
// original revision and is not applied again; an asynchronous operation
// is queued under its key.
func TestIdempotencyKeysAreDecoded(t *testing.T) {
	srv, q := keyServer(t)
	ctx := context.Background()
	merge := func(key string, completion sinkv1.CompletionMode) *sinkv1.WriteResult {
		t.Helper()
		resp, err := srv.Write(ctx, &sinkv1.WriteRequest{Completion: completion, Operations: []*sinkv1.WriteOperation{{
			Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{Address: keyAddr(), Profile: "counter", Intent: jsonDoc(`"x"`), IdempotencyKey: key}},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetResults()[0]
	}
	first := merge("m-1", sinkv1.CompletionMode_COMPLETION_MODE_WAIT_UNTIL_APPLIED)
	retry := merge("m-1", sinkv1.CompletionMode_COMPLETION_MODE_WAIT_UNTIL_APPLIED)
	if first.GetStatus() != sinkv1.OperationStatus_OPERATION_STATUS_APPLIED || retry.GetStatus() != first.GetStatus() ||
		string(retry.GetRevision()) != string(first.GetRevision()) || retry.GetError() != nil {
		t.Fatalf("first %v, retry %v: want the retry APPLIED with the first revision", first, retry)
	}
	read, err := srv.Read(ctx, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: keyAddr()}}})
	if err != nil || string(read.GetResults()[0].GetDocument().GetData()) != `"x"` {
		t.Fatalf("record after a retried counter merge: %v %v", err, read)
	}

	put, err := srv.Write(ctx, &sinkv1.WriteRequest{Completion: sinkv1.CompletionMode_COMPLETION_MODE_RETURN_AFTER_ACCEPTED, Operations: []*sinkv1.WriteOperation{{
		Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{Address: keyAddr(), Document: jsonDoc(`{}`), IdempotencyKey: "p-1"}},
	}}})
	if err != nil || put.GetResults()[0].GetMutationId() != "p-1" {
		t.Fatalf("async put: %v %v", err, put)
	}
	if m := merge("m-2", sinkv1.CompletionMode_COMPLETION_MODE_RETURN_AFTER_ACCEPTED); m.GetMutationId() != "m-2" {
		t.Fatalf("async merge: %v", m)
	}
	del, err := srv.Delete(ctx, &sinkv1.DeleteRequest{Completion: sinkv1.CompletionMode_COMPLETION_MODE_RETURN_AFTER_ACCEPTED,
		Operations: []*sinkv1.DeleteOperation{{Address: keyAddr(), IdempotencyKey: "d-1"}}})
	if err != nil || del.GetResults()[0].GetMutationId() != "d-1" {
		t.Fatalf("async delete: %v %v", err, del)
	}
	for i, want := range []string{"p-1", "m-2", "d-1"} {
		if m := q.got[i]; m.ID != want || !m.Keyed {
			t.Fatalf("queued mutation %d: id %q keyed %v, want %q keyed", i, m.ID, m.Keyed, want)
		}
	}
	// Without a key: no ID from the client, a generated one when queued.
	plain, err := srv.Delete(ctx, &sinkv1.DeleteRequest{Completion: sinkv1.CompletionMode_COMPLETION_MODE_RETURN_AFTER_ACCEPTED,
		Operations: []*sinkv1.DeleteOperation{{Address: keyAddr()}}})
	if err != nil || q.got[3].Keyed || plain.GetResults()[0].GetMutationId() != q.got[3].ID || q.got[3].ID == "" {
		t.Fatalf("unkeyed delete: %v %v %+v", err, plain, q.got[3])
	}

	// An invalid key is the operation's INVALID_ARGUMENT.
	bad, err := srv.Delete(ctx, &sinkv1.DeleteRequest{Operations: []*sinkv1.DeleteOperation{{Address: keyAddr(), IdempotencyKey: "has space"}}})
	if err != nil {
		t.Fatal(err)
	}
	if e := bad.GetResults()[0].GetError(); e == nil || codes.Code(e.GetCode()) != codes.InvalidArgument || !strings.Contains(e.GetMessage(), "idempotency_key") {
		t.Fatalf("invalid key: %v", bad)
	}
}
