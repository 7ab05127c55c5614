package application

import (
	"testing"

	"github.com/sink-io/sink/domain"
)

// TestSingleOperationBuffersArePooled: a request of one operation gets
// its per-operation state, with the buffers of the first wave (and, for a
// merge, of the first fold) that applies it, in one pooled oneBufs, and
// its job apart from them (jobs are never reused); each wave or fold
// buffer is handed out once: a retry or a later wave allocates its own.
func TestSingleOperationBuffersArePooled(t *testing.T) {
	for _, kind := range []domain.MutationKind{domain.MutationPut, domain.MutationMerge, domain.MutationDelete} {
		results, work, _, v, j, bufs, one := mutateSlices([]domain.Mutation{{Kind: kind}})
		if bufs != nil || one == nil {
			t.Fatalf("%s: buffers %p and %p for a request of one operation", kind, bufs, one)
		}
		if j == nil || len(results) != 1 {
			t.Fatalf("%s: job %p, %d results", kind, j, len(results))
		}
		if &work[0] != &one.work[0] || &v.datasets[0] != &one.datasets[0] || &v.admitted[0] != &one.admitted[0] ||
			&v.outcomes[0] != &one.outcomes[0] || &v.errs[0] != &one.errs[0] {
			t.Fatalf("%s: the operation's state is not in its pooled buffers", kind)
		}
		if w := j.takeWave(); w != &one.wave {
			t.Fatalf("%s: wave buffers %p, want the pooled ones", kind, w)
		}
		if again := j.takeWave(); again != nil {
			t.Fatalf("%s: the wave buffers were handed out twice", kind)
		}
		f := j.takeFold()
		if kind != domain.MutationMerge {
			if f != nil {
				t.Fatalf("%s: fold buffers for an operation that folds nothing", kind)
			}
			oneBufPool.put(one)
			continue
		}
		if f != &one.fold {
			t.Fatalf("merge: fold buffers %p, want the pooled ones", f)
		}
		if again := j.takeFold(); again != nil {
			t.Fatal("merge: the fold buffers were handed out twice")
		}
		oneBufPool.put(one)
	}
	// Several operations: pooled buffers, and a job that uses their IDs
	// and carries no single operation's buffers.
	_, _, _, _, j, bufs, one := mutateSlices(make([]domain.Mutation, 2))
	if bufs == nil || one != nil || j == nil || j.wave != nil || j.fold != nil || len(j.ids) != 2 || &j.ids[0] != &bufs.ids[0] {
		t.Fatalf("a request of two operations: job %+v, buffers %p, %p", j, bufs, one)
	}
	bufs.release()
}
