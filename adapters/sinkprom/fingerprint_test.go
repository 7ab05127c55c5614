package sinkprom

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestFingerprintMismatchesAreCounted(t *testing.T) {
	m := New(Options{})
	m.MergeFingerprintMismatch("counter", true)
	m.MergeFingerprintMismatch("counter", true)
	m.MergeFingerprintMismatch("counter", false)
	if got := testutil.ToFloat64(m.fingerprintMismatches.WithLabelValues("counter", "applied")); got != 2 {
		t.Fatalf("applied = %v", got)
	}
	if got := testutil.ToFloat64(m.fingerprintMismatches.WithLabelValues("counter", "dead_lettered")); got != 1 {
		t.Fatalf("dead_lettered = %v", got)
	}
	if n, err := testutil.GatherAndCount(m.reg, "sink_merge_fingerprint_mismatches_total"); err != nil || n != 2 {
		t.Fatalf("registered series %d, %v", n, err)
	}
}
