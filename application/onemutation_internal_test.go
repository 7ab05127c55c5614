package application

import (
	"testing"
	"unsafe"

	"github.com/sink-io/sink/domain"
)

// TestSingleOperationBuffersShareItsAllocation: a request of one operation
// carries the buffers of the first wave (and, for a merge, of the first
// fold) that applies it in its job's allocation, and each is handed out
// once: a retry or a later wave allocates its own.
func TestSingleOperationBuffersShareItsAllocation(t *testing.T) {
	for _, kind := range []domain.MutationKind{domain.MutationPut, domain.MutationMerge, domain.MutationDelete} {
		_, _, _, _, j, bufs := mutateSlices([]domain.Mutation{{Kind: kind}})
		if bufs != nil {
			t.Fatalf("%s: pooled buffers for a request of one operation", kind)
		}
		if j == nil {
			t.Fatalf("%s: no job of one operation", kind)
		}
		w := j.takeWave()
		if w == nil {
			t.Fatalf("%s: the job has no wave buffers", kind)
		}
		if one := (*oneMutation)(containerOf(j)); w != &one.wave {
			t.Fatalf("%s: the wave buffers are not in the job's allocation", kind)
		}
		if again := j.takeWave(); again != nil {
			t.Fatalf("%s: the wave buffers were handed out twice", kind)
		}
		f := j.takeFold()
		if kind != domain.MutationMerge {
			if f != nil {
				t.Fatalf("%s: fold buffers for an operation that folds nothing", kind)
			}
			continue
		}
		if one := (*oneMerge)(containerOf(j)); f == nil || f != &one.fold {
			t.Fatalf("merge: fold buffers %p, want those of its allocation", f)
		}
		if again := j.takeFold(); again != nil {
			t.Fatal("merge: the fold buffers were handed out twice")
		}
	}
	// Several operations: pooled buffers, and a job that uses their IDs
	// and carries no single operation's buffers.
	_, _, _, _, j, bufs := mutateSlices(make([]domain.Mutation, 2))
	if bufs == nil || j == nil || j.wave != nil || j.fold != nil || len(j.ids) != 2 || &j.ids[0] != &bufs.ids[0] {
		t.Fatalf("a request of two operations: job %+v, buffers %p", j, bufs)
	}
	bufs.release()
}

// containerOf returns the oneMutation whose job j is.
func containerOf(j *job) unsafe.Pointer {
	return unsafe.Add(unsafe.Pointer(j), -int(unsafe.Offsetof(oneMutation{}.job)))
}
