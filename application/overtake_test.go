package application_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// frozenProfile is merge profile "add" of a worker that freezes in the
// middle of the merge of f (intent fIntent): it says so on entered, and
// fails it once release is closed (past its budget, or not). It
// cannot merge f (a later try of it fails at once); other merges add.
type frozenProfile struct {
	addProfile
	entered chan struct{}
	release chan struct{}
	froze   bool
}

const fIntent = 7

func (p *frozenProfile) Merge(ctx context.Context, in ports.MergeInput) (domain.Document, error) {
	if string(in.Intent.Data) != string(doc(fIntent).Data) {
		return p.addProfile.Merge(ctx, in)
	}
	if !p.froze {
		p.froze = true
		close(p.entered)
		<-p.release
	}
	return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "cannot merge it")
}

// overtakeRace runs worker A's call [f: a merge at offset 10, g: a put (or,
// with foldG, a merge) at offset 100] of record k. A's merge of f freezes
// past its budget; meanwhile other runs first (another worker, writing
// the same storage); then A goes on: f fails, and g is written.
func overtakeRace(t *testing.T, batch, foldG bool, other func(b *application.Service)) []ports.ApplyOutcome {
	t.Helper()
	mem := memory.New()
	frozen := &frozenProfile{entered: make(chan struct{}), release: make(chan struct{})}
	newWorker := func(p ports.MergeProfile) *application.Service {
		cfg := application.DefaultConfig()
		cfg.Apply.BaseBackoff, cfg.Apply.MaxBackoff = 0, 0
		cfg.Batch.Enabled = batch
		cfg.Merge.Timeout = 20 * time.Millisecond
		s, err := application.NewService(cfg, mem, []ports.MergeProfile{p})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := newWorker(frozen), newWorker(addProfile{})
	g := queued(put("k", 1000), "g", 100)
	if foldG {
		g = queued(merge("k", 1000), "g", 100)
	}
	done := make(chan []ports.ApplyOutcome, 1)
	go func() {
		done <- a.ApplyMutations(context.Background(), []domain.Mutation{queued(merge("k", fIntent), "f", 10), g})
	}()
	<-frozen.entered
	other(b)
	close(frozen.release)
	out := <-done
	if out[1].Err != nil || out[1].Skipped {
		t.Fatalf("g: %+v, want written", out[1])
	}
	return out
}

// The frozen-worker race, with the ring rotated: while worker A was frozen
// in the merge of f, worker B applied f and then more than the ring's size
// of later mutations of the record, so f's ID left the ring. A's write of
// g still lands (the mark is below g), but the record's mark had passed f
// when it did: B handled f, A did not overtake it. f is reported
// superseded (acked by A's worker), not as a failure A overtook, which A's
// worker would dead-letter although B applied it.
func TestFailureHandledByAnotherWorkerIsNotOvertaken(t *testing.T) {
	for _, batch := range []bool{false, true} {
		for _, foldG := range []bool{false, true} {
			t.Run(fmt.Sprintf("batching=%v/g-merge=%v", batch, foldG), func(t *testing.T) {
				out := overtakeRace(t, batch, foldG, func(b *application.Service) {
					muts := []domain.Mutation{queued(merge("k", fIntent), "f", 10)}
					for n := 1; n <= domain.DefaultAppliedRing+8; n++ {
						muts = append(muts, queued(merge("k", 1), fmt.Sprintf("h%d", n), int64(10+n)))
					}
					for i, o := range b.ApplyMutations(context.Background(), muts) {
						if o.Err != nil || o.Skipped {
							t.Fatalf("worker B's mutation %d: %+v", i, o)
						}
					}
				})
				if f := out[0]; f.Err != nil || !f.Skipped || !f.Superseded || f.Overtaken {
					t.Fatalf("f: %+v (err %v), want skipped as superseded: worker B applied it", f, f.Err)
				}
			})
		}
	}
}

// The converse: nobody handled f (the record's mark stayed below it) when
// A wrote g over it: f failed and A overtook it; only A can dead-letter it.
func TestFailureOvertakenByALaterWrite(t *testing.T) {
	for _, batch := range []bool{false, true} {
		for _, foldG := range []bool{false, true} {
			t.Run(fmt.Sprintf("batching=%v/g-merge=%v", batch, foldG), func(t *testing.T) {
				out := overtakeRace(t, batch, foldG, func(b *application.Service) {
					// Another worker writes the record below f's position.
					if o := b.ApplyMutations(context.Background(), []domain.Mutation{queued(merge("k", 1), "e", 5)}); o[0].Err != nil {
						t.Fatalf("e: %+v", o[0])
					}
				})
				f := out[0]
				if f.Err == nil || !f.Overtaken || f.Skipped {
					t.Fatalf("f: %+v, want a failure this call overtook", f)
				}
			})
		}
	}
}

// A failure followed by no write of its record, or only by a delete (which
// removes the record with its mark: the next reader applies f, it does not
// skip it), is not overtaken.
func TestFailureNotOvertakenWithoutALaterMarkedWrite(t *testing.T) {
	s := markedService(t, memory.New(), nil)
	ctx := context.Background()
	bad := queued(merge("k", fIntent), "f", 10)
	bad.Merge.Intent = domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"N":"x"}`)} // the profile rejects it
	out := s.ApplyMutations(ctx, []domain.Mutation{queued(put("k", 1), "p", 9), bad, queued(del("k"), "d", 11)})
	if out[1].Err == nil || out[1].Overtaken || out[2].Err != nil {
		t.Fatalf("outcomes %+v", out)
	}
	out = s.ApplyMutations(ctx, []domain.Mutation{queued(bad, "f2", 20), queued(put("k", 2), "p2", 21)})
	if out[0].Err == nil || !out[0].Overtaken {
		t.Fatalf("a failure followed by a put of its record: %+v, want overtaken", out[0])
	}
}
