package ports_test

import (
	"fmt"
	"testing"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// The typed values of the observers render as the label values the
// metrics have always used: changing one changes a metric.
func TestObservedValuesRenderAsTheirLabels(t *testing.T) {
	for _, c := range []struct {
		v    fmt.Stringer
		want string
	}{
		{ports.StorageRead, "read"},
		{ports.StorageWrite, "write"},
		{ports.StorageCall(0), "unknown"},
		{ports.SourceRequest, "request"},
		{ports.SourceWorker, "worker"},
		{ports.OperationRead, "read"},
		{ports.OperationPut, "put"},
		{ports.OperationMerge, "merge"},
		{ports.OperationDelete, "delete"},
		{ports.OperationUnknown, "unknown"},
		{ports.CompletionNone, ""},
		{ports.CompletionWaitUntilApplied, "wait_until_applied"},
		{ports.CompletionReturnAfterAccepted, "return_after_accepted"},
		{ports.StatusApplied, "applied"},
		{ports.StatusAccepted, "accepted"},
		{ports.StatusFound, "found"},
		{ports.StatusNotFound, "not_found"},
		{ports.StatusPreconditionFailed, "precondition_failed"},
		{ports.StatusFailed, "failed"},
		{ports.StatusSkipped, "skipped"},
		{ports.StatusUnspecified, "unspecified"},
		{ports.DeadLetterReason{Code: domain.CodeInvalidArgument}, "INVALID_ARGUMENT"},
		{ports.DeadLetterReason{Code: domain.CodeInternal}, "INTERNAL"},
		{ports.DeadLetterReason{Undecodable: true}, "UNDECODABLE"},
	} {
		if got := c.v.String(); got != c.want {
			t.Errorf("%T(%v).String() = %q, want %q", c.v, c.v, got, c.want)
		}
	}
}

func TestOperationKindOfMutationKinds(t *testing.T) {
	for k, want := range map[domain.MutationKind]ports.OperationKind{
		domain.MutationPut:    ports.OperationPut,
		domain.MutationMerge:  ports.OperationMerge,
		domain.MutationDelete: ports.OperationDelete,
		0:                     ports.OperationUnknown,
		99:                    ports.OperationUnknown,
	} {
		if got := ports.OperationKindOf(k); got != want {
			t.Errorf("OperationKindOf(%d) = %v, want %v", k, got, want)
		}
		// Same label as the mutation kind.
		if got := ports.OperationKindOf(k).String(); got != k.String() {
			t.Errorf("OperationKindOf(%d) renders %q, the mutation kind %q", k, got, k.String())
		}
	}
}

func TestCodeLabelIsEmptyWithoutError(t *testing.T) {
	if got := (ports.OperationOutcome{Code: domain.CodeNotFound}).CodeLabel(); got != "" {
		t.Errorf("without error: %q", got)
	}
	if got := (ports.OperationOutcome{HasError: true, Code: domain.CodeInternal}).CodeLabel(); got != "INTERNAL" {
		t.Errorf("with error: %q", got)
	}
}
