package application

import "testing"

// Observed completion modes keep the labels they had as strings.
func TestObservedValuesKeepTheirLabels(t *testing.T) {
	for c, want := range map[Completion]string{WaitUntilApplied: "wait_until_applied", ReturnAfterAccepted: "return_after_accepted"} {
		if got := c.observed().String(); got != want {
			t.Errorf("completion %d is observed as %q, want %q", c, got, want)
		}
	}
}
