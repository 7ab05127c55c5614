package application_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

type fakeAdmission struct {
	mu     sync.Mutex
	got    []ports.AdmissionRequest
	reject error
}

func (a *fakeAdmission) Admit(_ context.Context, r ports.AdmissionRequest) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, r)
	return a.reject
}

// Invalid and denied operations neither spend the rate budget nor become
// metric labels; only valid, authorized operations of the served store do.
func TestOnlyValidAuthorizedOperationsAreChargedAndLabelled(t *testing.T) {
	adm := &fakeAdmission{}
	obs := &recordingObserver{}
	rec := &recorder{Storage: memory.New()}
	s, err := application.NewService(application.DefaultConfig(), rec, []ports.MergeProfile{addProfile{}},
		application.WithAdmission(adm), application.WithObserver(obs), application.RequirePrincipal())
	if err != nil {
		t.Fatal(err)
	}
	reader := domain.WithPrincipal(context.Background(), &domain.Principal{Name: "reader",
		Grants: []domain.Grant{{Store: "*", Namespace: "n", Dataset: "d", Rights: domain.RightRead}}})
	admin := domain.WithPrincipal(context.Background(), &domain.Principal{Name: "admin",
		Grants: []domain.Grant{{Store: "*", Namespace: "*", Dataset: "*", Rights: domain.RightAll}}})

	// The scenario: denied writes to 150 invented datasets, and
	// operations naming a store that is not served.
	var muts []domain.Mutation
	for i := 0; i < 150; i++ {
		m := put("k", i)
		m.Address.Dataset = fmt.Sprintf("invented-%03d", i)
		muts = append(muts, m)
	}
	elsewhere := put("k", 1)
	elsewhere.Address.Store = "not-served"
	muts = append(muts, elsewhere)
	res, err := s.Write(reader, muts, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	if domain.CodeOf(res[0].Err) != domain.CodePermissionDenied || domain.CodeOf(res[150].Err) != domain.CodeInvalidArgument {
		t.Fatalf("results: %+v %+v", res[0], res[150])
	}
	bad := addr("k")
	bad.Store = "not-served"
	if _, err := s.Read(reader, []domain.Address{bad}); err != nil {
		t.Fatal(err)
	}
	if len(adm.got) != 0 {
		t.Fatalf("requests without a valid, authorized operation were charged: %+v", adm.got)
	}
	for _, o := range obs.outcomes {
		if o.Dataset != (domain.DatasetRef{}) {
			t.Fatalf("a rejected operation became a label: %+v", o)
		}
	}

	// A mixed request is charged for its valid, authorized part only.
	obs.outcomes = nil
	invalid := put("", 1)
	res, err = s.Write(admin, []domain.Mutation{put("a", 1), invalid, muts[0], elsewhere, put("ok", 1)}, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != application.StatusApplied || res[1].Status != application.StatusFailed || res[4].Status != application.StatusApplied {
		t.Fatalf("mixed request results: %+v", res)
	}
	// Keys and documents: "a" {"N":1}, "k" {"N":0}, "ok" {"N":1}.
	if len(adm.got) != 1 || adm.got[0] != (ports.AdmissionRequest{Principal: "admin", Operations: 3, Bytes: 8 + 8 + 9}) {
		t.Fatalf("charged %+v", adm.got)
	}
	labelled := 0
	for _, o := range obs.outcomes {
		if o.Dataset != (domain.DatasetRef{}) {
			labelled++
			if o.Dataset.Store != "primary" || o.Status != ports.StatusApplied {
				t.Fatalf("labelled outcome %+v", o)
			}
		}
	}
	if labelled != 3 {
		t.Fatalf("%d labelled outcomes, want the 3 admitted ones: %+v", labelled, obs.outcomes)
	}

	// A rejection fails the whole request with the admission's error,
	// before any storage call, and is not observed per operation.
	adm.reject = errors.New("over the limit")
	rec.writes, rec.reads, obs.outcomes = nil, nil, nil
	if _, err := s.Write(admin, []domain.Mutation{put("b", 1)}, application.WaitUntilApplied); err != adm.reject {
		t.Fatalf("write: %v", err)
	}
	if _, err := s.Read(admin, []domain.Address{addr("a")}); err != adm.reject {
		t.Fatalf("read: %v", err)
	}
	if len(rec.writes)+len(rec.reads)+len(obs.outcomes) != 0 {
		t.Fatalf("a rejected request did work: %v %v %v", rec.writes, rec.reads, obs.outcomes)
	}
}
