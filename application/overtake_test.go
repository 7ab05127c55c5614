package application_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// frozenProfile is merge profile "add" of a worker that freezes in the
// middle of the merge of f (intent fIntent): it says so on entered, and
// fails it once release is closed. It
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
// with foldG, a merge) at offset 100] of record k. A freezes in the merge
// of f (as a worker stopped by SIGSTOP whose merge budget then runs out);
// meanwhile other runs (another worker, writing the same storage); then A
// goes on: f fails, and g is written.
func overtakeRace(t *testing.T, batch, foldG bool, other func(b *application.Service)) []ports.ApplyOutcome {
	t.Helper()
	mem := memory.New()
	frozen := &frozenProfile{entered: make(chan struct{}), release: make(chan struct{})}
	newWorker := func(p ports.MergeProfile) *application.Service {
		cfg := application.DefaultConfig()
		cfg.Apply.BaseBackoff, cfg.Apply.MaxBackoff = 0, 0
		cfg.Batch.Enabled = batch
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
//
// With the ring not rotated (B applied f and a few more), f's ID is in
// the ring: f is skipped as applied.
func TestFailureHandledByAnotherWorkerIsNotOvertaken(t *testing.T) {
	for _, batch := range []bool{false, true} {
		for _, foldG := range []bool{false, true} {
			for _, rotated := range []bool{true, false} {
				t.Run(fmt.Sprintf("batching=%v/g-merge=%v/ring-rotated=%v", batch, foldG, rotated), func(t *testing.T) {
					out := overtakeRace(t, batch, foldG, func(b *application.Service) {
						later := 3
						if rotated {
							later = domain.DefaultAppliedRing + 8
						}
						muts := []domain.Mutation{queued(merge("k", fIntent), "f", 10)}
						for n := 1; n <= later; n++ {
							muts = append(muts, queued(merge("k", 1), fmt.Sprintf("h%d", n), int64(10+n)))
						}
						for i, o := range b.ApplyMutations(context.Background(), muts) {
							if o.Err != nil || o.Skipped {
								t.Fatalf("worker B's mutation %d: %+v", i, o)
							}
						}
					})
					if f := out[0]; f.Err != nil || !f.Skipped || f.Superseded != rotated || f.Overtaken {
						t.Fatalf("f: %+v, want skipped (superseded: %v): worker B applied it", f, rotated)
					}
				})
			}
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

// lostWriteOf is a storage whose first write carrying mark ID id ends with
// an unknown outcome: written (landed) or not.
type lostWriteOf struct {
	ports.Storage
	id     string
	landed bool
	mu     sync.Mutex
	done   bool
}

func (s *lostWriteOf) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	s.mu.Lock()
	lose := -1
	for k, op := range ops {
		if !s.done && op.Mark != nil && slices.Contains(op.Mark.IDs, s.id) {
			lose, s.done = k, true
		}
	}
	s.mu.Unlock()
	if lose < 0 {
		return s.Storage.Write(ctx, ops)
	}
	var out []ports.WriteResult
	if s.landed {
		out = s.Storage.Write(ctx, ops)
	} else {
		out = s.Storage.Write(ctx, slices.Delete(slices.Clone(ops), lose, lose+1))
		out = slices.Insert(out, lose, ports.WriteResult{})
	}
	out[lose] = ports.WriteResult{Err: &domain.Error{Code: domain.CodeOutcomeUnknown, Message: "the answer was lost", Retryable: true}}
	return out
}

// When the write that would overtake a failure has an unknown outcome,
// the call cannot tell later whether its own write or another worker
// passed the failure: it counts as overtaken (dead-lettered rather than
// lost). When the write did not land, its retry decides as usual.
func TestFailureOvertakenByAWriteOfUnknownOutcome(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprintf("landed=%v", landed), func(t *testing.T) {
			st := &lostWriteOf{Storage: memory.New(), id: "g", landed: landed}
			s := markedService(t, st, nil)
			bad := queued(merge("k", 1), "f", 10)
			bad.Merge.Intent = domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"N":"x"}`)} // the profile rejects it
			out := s.ApplyMutations(context.Background(), []domain.Mutation{queued(put("k", 1), "p", 9), bad, queued(put("k", 2), "g", 11)})
			if out[0].Err != nil || out[2].Err != nil || out[2].Skipped != landed {
				t.Fatalf("outcomes %+v, want p and g applied (g skipped when its first write landed)", out)
			}
			if f := out[1]; f.Err == nil || !f.Overtaken {
				t.Fatalf("f: %+v, want a failure overtaken", f)
			}
		})
	}
}

// A fold that starts from the state the service last wrote (a hint) does
// not know the whole mark after a put that did not read the record: when
// it would overtake a merge that failed in it, it reads the record first,
// and a merge the mark holds (applied under its ID before) is skipped,
// not overtaken.
func TestFoldFromAHintReadsBeforeOvertaking(t *testing.T) {
	mem := memory.New()
	s := markedService(t, mem, nil, func(c *application.Config) { c.Batch.Enabled = true })
	ctx := context.Background()
	write1(t, s, put("k", 0))
	// f was applied before, under its ID (a replay of its dead letter).
	if r := write1(t, s, keyed(merge("k", 1), "f")); r.Status != application.StatusApplied || r.Skipped {
		t.Fatalf("keyed merge: %+v", r)
	}
	bad := queued(merge("k", 1), "f", 10)
	bad.Merge.Intent = domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"N":"x"}`)} // the profile rejects it now
	out := s.ApplyMutations(ctx, []domain.Mutation{queued(put("k", 5), "p", 9), bad, queued(merge("k", 1), "g", 11)})
	if out[0].Err != nil || out[2].Err != nil || out[2].Skipped {
		t.Fatalf("outcomes %+v, want p and g applied", out)
	}
	if f := out[1]; f.Err != nil || !f.Skipped || f.Overtaken {
		t.Fatalf("f: %+v, want skipped: its record's mark holds it", f)
	}
	if n := value(t, s, "k"); n != 6 {
		t.Fatalf("record holds %d, want 6", n)
	}
}

// failFirstWriteOf is a storage whose first write carrying mark ID id
// fails, transiently, with nothing written.
type failFirstWriteOf struct {
	ports.Storage
	id   string
	mu   sync.Mutex
	done bool
}

func (s *failFirstWriteOf) Write(ctx context.Context, ops []ports.WriteOp) []ports.WriteResult {
	s.mu.Lock()
	fail := -1
	for k, op := range ops {
		if !s.done && op.Mark != nil && slices.Contains(op.Mark.IDs, s.id) {
			fail, s.done = k, true
		}
	}
	s.mu.Unlock()
	if fail < 0 {
		return s.Storage.Write(ctx, ops)
	}
	out := s.Storage.Write(ctx, slices.Delete(slices.Clone(ops), fail, fail+1))
	return slices.Insert(out, fail, ports.WriteResult{Err: domain.Errorf(domain.CodeUnavailable, "no connection")})
}

// The write that overtakes a failure may come in a later attempt of the
// call (its first attempt failed transiently), and the record's writes
// after it do not undo the decision.
func TestFailureOvertakenInALaterAttempt(t *testing.T) {
	s := markedService(t, &failFirstWriteOf{Storage: memory.New(), id: "g"}, nil)
	bad := queued(merge("k", 1), "f", 10)
	bad.Merge.Intent = domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"N":"x"}`)} // the profile rejects it
	out := s.ApplyMutations(context.Background(), []domain.Mutation{bad, queued(put("k", 2), "g", 11), queued(put("k", 3), "h", 12), queued(merge("k", 1), "i", 13)})
	for n, o := range out[1:] {
		if o.Err != nil || o.Skipped {
			t.Fatalf("mutation %d: %+v, want applied", n+1, o)
		}
	}
	if out[1].Attempts != 2 {
		t.Fatalf("g applied in attempt %d, want 2", out[1].Attempts)
	}
	if f := out[0]; f.Err == nil || !f.Overtaken {
		t.Fatalf("f: %+v, want a failure overtaken", f)
	}
	if n := value(t, s, "k"); n != 4 {
		t.Fatalf("record holds %d, want 4", n)
	}
}

// A worker that lost its partitions makes no write that would overtake a
// failed mutation: the consumer's fence check (ports.FenceCheck) is asked
// right before it. Fenced, the write is not made (g ends CodeCanceled, for
// the partition's owner to apply) and f is not overtaken (a fenced worker
// withholds its dead letter; the owner meets f again and applies or
// dead-letters it). Not fenced, the write goes ahead as before.
func TestNoOvertakingWriteWhenFenced(t *testing.T) {
	for _, foldG := range []bool{false, true} {
		for _, lost := range []bool{true, false} {
			t.Run(fmt.Sprintf("g-merge=%v/fenced=%v", foldG, lost), func(t *testing.T) {
				mem := memory.New()
				cfg := application.DefaultConfig()
				cfg.Apply.BaseBackoff, cfg.Apply.MaxBackoff = 0, 0
				s, err := application.NewService(cfg, mem, []ports.MergeProfile{addProfile{}})
				if err != nil {
					t.Fatal(err)
				}
				bad := queued(merge("k", 1), "f", 10)
				bad.Merge.Intent = domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"N":"x"}`)} // the profile rejects it
				g := queued(put("k", 1000), "g", 100)
				if foldG {
					g = queued(merge("k", 1000), "g", 100)
				}
				var asked int
				ctx := ports.WithFenceCheck(context.Background(), func(context.Context) error {
					asked++
					if lost {
						return fmt.Errorf("fenced: the partitions moved on")
					}
					return nil
				})
				out := s.ApplyMutations(ctx, []domain.Mutation{bad, g})
				if asked == 0 {
					t.Fatal("the fence was not checked before the overtaking write")
				}
				r, err := s.Read(context.Background(), []domain.Address{g.Address})
				if err != nil {
					t.Fatal(err)
				}
				if !lost {
					if out[0].Err == nil || !out[0].Overtaken || out[1].Err != nil || r[0].Status != application.StatusFound {
						t.Fatalf("not fenced: outcomes %+v, record %v; want f overtaken and g written", out, r[0].Status)
					}
					return
				}
				if out[0].Err == nil || out[0].Overtaken {
					t.Fatalf("fenced: f %+v, want a failure not overtaken", out[0])
				}
				if e := domain.AsError(out[1].Err); out[1].Err == nil || e.Code != domain.CodeCanceled {
					t.Fatalf("fenced: g %+v, want canceled (not written)", out[1])
				}
				if r[0].Status != application.StatusNotFound {
					t.Fatalf("fenced: the record was written: %+v", r[0])
				}
			})
		}
	}
}
