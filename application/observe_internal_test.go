package application

import "testing"

// Observed statuses and completion modes keep the labels they had as
// strings: the application's status names, the completion mode names.
func TestObservedValuesKeepTheirLabels(t *testing.T) {
	for s := StatusUnspecified; s <= StatusFailed; s++ {
		if got := s.observed().String(); got != s.String() {
			t.Errorf("status %v is observed as %q", s, got)
		}
	}
	for c, want := range map[Completion]string{WaitUntilApplied: "wait_until_applied", ReturnAfterAccepted: "return_after_accepted"} {
		if got := c.observed().String(); got != want {
			t.Errorf("completion %d is observed as %q, want %q", c, got, want)
		}
	}
}
