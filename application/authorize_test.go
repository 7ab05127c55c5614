package application_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

func TestAuthorizationIsPerOperationAndBeforeStorage(t *testing.T) {
	rec := &recorder{Storage: memory.New()}
	q := &fakeQueue{}
	s, err := application.NewService(application.DefaultConfig(), rec, []ports.MergeProfile{addProfile{}},
		application.WithQueue(q), application.RequirePrincipal())
	if err != nil {
		t.Fatal(err)
	}
	// Seed as a principal with every right.
	admin := domain.WithPrincipal(context.Background(), &domain.Principal{Name: "admin",
		Grants: []domain.Grant{{Store: "*", Namespace: "*", Dataset: "*", Rights: domain.RightAll}}})
	if res, err := s.Write(admin, []domain.Mutation{put("seed", 1)}, application.WaitUntilApplied); err != nil || res[0].Err != nil {
		t.Fatalf("seed: %v %+v", err, res)
	}
	rec.writes, rec.reads = nil, nil

	// "writer" may read and write n/d, nothing else.
	ctx := domain.WithPrincipal(context.Background(), &domain.Principal{Name: "writer",
		Grants: []domain.Grant{{Store: "*", Namespace: "n", Dataset: "d", Rights: domain.RightRead | domain.RightWrite}}})
	other := put("x", 5)
	other.Address.Dataset = "secret"
	del := domain.Mutation{Kind: domain.MutationDelete, Address: addr("seed")}
	res, err := s.Write(ctx, []domain.Mutation{put("a", 1), other, merge("seed", 2)}, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || res[2].Err != nil {
		t.Fatalf("allowed operations failed: %+v", res)
	}
	if res[1].Err == nil || res[1].Err.Code != domain.CodePermissionDenied || res[1].Status != application.StatusFailed ||
		!strings.Contains(res[1].Err.Message, `principal "writer" has no write right on primary/n/secret`) {
		t.Fatalf("disallowed put: %+v", res[1])
	}
	for _, call := range rec.writes {
		for _, op := range call {
			if op.Address.Dataset == "secret" {
				t.Fatal("a disallowed operation reached storage")
			}
		}
	}
	if res, _ := s.Delete(ctx, []domain.Mutation{del}, application.WaitUntilApplied); res[0].Err.Code != domain.CodePermissionDenied {
		t.Fatalf("delete without the delete right: %+v", res[0])
	}
	if rr, err := s.Read(admin, []domain.Address{addr("seed")}); err != nil || rr[0].Status != application.StatusFound ||
		string(rr[0].Record.Document.Data) != `{"N":3}` {
		t.Fatalf("the record was changed by a denied delete: %v %+v", err, rr)
	}

	// Reads: the disallowed address never reaches storage.
	rec.reads = nil
	secret := addr("x")
	secret.Dataset = "secret"
	rr, err := s.Read(ctx, []domain.Address{addr("a"), secret})
	if err != nil || rr[0].Status != application.StatusFound || rr[1].Err == nil || rr[1].Err.Code != domain.CodePermissionDenied {
		t.Fatalf("read: %v %+v", err, rr)
	}
	if len(rec.reads) != 1 || len(rec.reads[0]) != 1 {
		t.Fatalf("storage reads %v, want only the allowed address", rec.reads)
	}

	// Async: disallowed work is never queued.
	res, err = s.Write(ctx, []domain.Mutation{other, put("b", 1)}, application.ReturnAfterAccepted)
	if err != nil || res[0].Err.Code != domain.CodePermissionDenied || res[1].Status != application.StatusAccepted {
		t.Fatalf("async: %v %+v", err, res)
	}
	if len(q.got) != 1 || q.got[0].Address.Key.StringValue() != "b" {
		t.Fatalf("queued %+v", q.got)
	}

	// No principal at all: the whole request is refused.
	if _, err := s.Read(context.Background(), []domain.Address{addr("a")}); domain.CodeOf(err) != domain.CodeUnauthenticated {
		t.Fatalf("anonymous read: %v", err)
	}
	if _, err := s.Write(context.Background(), []domain.Mutation{put("a", 1)}, application.WaitUntilApplied); domain.CodeOf(err) != domain.CodeUnauthenticated {
		t.Fatalf("anonymous write: %v", err)
	}
}

func TestNoPrincipalMeansNoAuthorizationWithoutRequirePrincipal(t *testing.T) {
	s := newService(t, memory.New())
	if res, err := s.Write(context.Background(), []domain.Mutation{put("a", 1)}, application.WaitUntilApplied); err != nil || res[0].Err != nil {
		t.Fatalf("%v %+v", err, res)
	}
}
