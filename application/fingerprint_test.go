package application_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// fpProfile is the add profile with a definition fingerprint.
type fpProfile struct {
	addProfile
	fp string
}

func (p fpProfile) Fingerprint() string { return p.fp }

type fpObserver struct {
	ports.NopObserver
	mu     sync.Mutex
	counts map[string]int
}

func (o *fpObserver) MergeFingerprintMismatch(profile string, applied bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	key := profile + "/dead-lettered"
	if applied {
		key = profile + "/applied"
	}
	o.counts[key]++
}

// Async submission records the profile's fingerprint with the queued merge
// (and only the profile's: a caller cannot set it), and none for profiles
// without one.
func TestAsyncMergeCarriesTheFingerprint(t *testing.T) {
	q := &fakeQueue{}
	s, err := application.NewService(application.DefaultConfig(), memory.New(), []ports.MergeProfile{fpProfile{fp: "sha256:aa"}}, application.WithQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	m := merge("k", 1)
	m.Merge.Fingerprint = "sha256:forged"
	if _, err := s.Write(context.Background(), []domain.Mutation{m, put("p", 1)}, application.ReturnAfterAccepted); err != nil {
		t.Fatal(err)
	}
	if len(q.got) != 2 || q.got[0].Merge.Fingerprint != "sha256:aa" || q.got[1].Merge.Fingerprint != "" {
		t.Fatalf("queued %+v", q.got)
	}

	q = &fakeQueue{}
	s, err = application.NewService(application.DefaultConfig(), memory.New(), []ports.MergeProfile{addProfile{}}, application.WithQueue(q))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(context.Background(), []domain.Mutation{m}, application.ReturnAfterAccepted); err != nil {
		t.Fatal(err)
	}
	if q.got[0].Merge.Fingerprint != "" {
		t.Fatalf("a Go profile's merge got fingerprint %q", q.got[0].Merge.Fingerprint)
	}
}

// The worker applies a merge queued under another definition, or
// dead-letters it, as the policy says, and counts it either way; merges
// with the same or no fingerprint are applied and not counted.
func TestWorkerFingerprintPolicy(t *testing.T) {
	for _, policy := range []application.FingerprintPolicy{"", application.FingerprintApply, application.FingerprintDeadLetter} {
		t.Run(string(policy), func(t *testing.T) {
			obs := &fpObserver{counts: map[string]int{}}
			opts := []application.Option{application.WithObserver(obs)}
			if policy != "" {
				opts = append(opts, application.WithFingerprintPolicy(policy))
			}
			s, err := application.NewService(application.DefaultConfig(), memory.New(), []ports.MergeProfile{fpProfile{fp: "sha256:new"}}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			muts := []domain.Mutation{merge("same", 1), merge("none", 1), merge("old", 1)}
			muts[0].Merge.Fingerprint = "sha256:new"
			muts[2].Merge.Fingerprint = "sha256:old"
			for i := range muts {
				muts[i].ID = "m" + muts[i].Address.Key.StringValue()
			}
			out := s.ApplyMutations(context.Background(), muts)
			for i := 0; i < 2; i++ {
				if out[i].Err != nil {
					t.Fatalf("mutation %d: %v", i, out[i].Err)
				}
			}
			if policy == application.FingerprintDeadLetter {
				e := domain.AsError(out[2].Err)
				if out[2].Err == nil || e.Code != domain.CodeFailedPrecondition || e.Retryable ||
					!strings.Contains(e.Error(), `merge profile "add" has changed since the merge was queued (queued under definition sha256:old, now sha256:new)`) {
					t.Fatalf("dead-letter policy: %v", e)
				}
				if obs.counts["add/dead-lettered"] != 1 || len(obs.counts) != 1 {
					t.Fatalf("counted %v", obs.counts)
				}
				res, _ := s.Read(context.Background(), []domain.Address{addr("old")})
				if res[0].Status != application.StatusNotFound {
					t.Fatal("the dead-lettered merge was applied")
				}
				return
			}
			if out[2].Err != nil {
				t.Fatalf("apply policy: %v", out[2].Err)
			}
			if obs.counts["add/applied"] != 1 || len(obs.counts) != 1 {
				t.Fatalf("counted %v", obs.counts)
			}
		})
	}
}

// A fingerprint from the log is never quoted unless it is well formed.
func TestWorkerFingerprintMessageIsSafe(t *testing.T) {
	s, err := application.NewService(application.DefaultConfig(), memory.New(), []ports.MergeProfile{fpProfile{fp: "sha256:new"}},
		application.WithFingerprintPolicy(application.FingerprintDeadLetter))
	if err != nil {
		t.Fatal(err)
	}
	m := merge("k", 1)
	m.ID = "m1"
	m.Merge.Fingerprint = "secret \xff data"
	out := s.ApplyMutations(context.Background(), []domain.Mutation{m})
	if out[0].Err == nil || strings.Contains(out[0].Err.Error(), "secret") || !strings.Contains(out[0].Err.Error(), "(malformed)") {
		t.Fatalf("%v", out[0].Err)
	}
}
