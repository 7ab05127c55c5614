package faults

import (
	"strings"
	"testing"
	"time"
)

// The counting that the suite's verdicts rest on: lost, applied twice
// (a replayed suffix), out of order, never sent, ambiguous.
func TestAnalyzeCounts(t *testing.T) {
	sent := map[string]int{"a": 6, "b": 3}
	for _, tc := range []struct {
		name    string
		acked   map[string][]int
		failed  map[string][]int
		applied map[string][]int
		want    counts
	}{
		{"clean", map[string][]int{"a": {1, 2, 3}}, nil, map[string][]int{"a": {1, 2, 3}},
			counts{Accepted: 3, Applied: 3}},
		{"lost", map[string][]int{"a": {1, 2, 3}}, nil, map[string][]int{"a": {1, 3}},
			counts{Accepted: 3, Applied: 2, Lost: 1}},
		{"replayed suffix", map[string][]int{"a": {1, 2, 3, 4, 5, 6}}, nil, map[string][]int{"a": {1, 2, 3, 4, 5, 3, 4, 5, 6}},
			counts{Accepted: 6, Applied: 6, Twice: 3}},
		{"reordered", map[string][]int{"a": {1, 2, 3}, "b": {1, 2}}, nil, map[string][]int{"a": {1, 3, 2}, "b": {2, 1}},
			counts{Accepted: 5, Applied: 5, OutOfOrder: 2}},
		{"never sent", map[string][]int{"b": {1}}, nil, map[string][]int{"b": {1, 7}},
			counts{Accepted: 1, Applied: 2, Unasked: 1}},
		{"failed but applied", map[string][]int{"a": {1, 3}}, map[string][]int{"a": {2}}, map[string][]int{"a": {1, 2, 3}},
			counts{Accepted: 2, Applied: 3, Ambiguous: 1}},
		{"nothing applied", map[string][]int{"a": {1, 2}, "b": {1}}, nil, nil,
			counts{Accepted: 3, Lost: 3}},
	} {
		if got := analyze(tc.acked, tc.failed, tc.applied, sent); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestTrialsConfig(t *testing.T) {
	t.Setenv(envTrials, "worker-sigkill=20, db-pause=5")
	got, err := trialsConfig()
	if err != nil {
		t.Fatal(err)
	}
	if got["worker-sigkill"] != 20 || got["db-pause"] != 5 || got["broker-restart"] != 2 {
		t.Errorf("trials %v", got)
	}
	for _, bad := range []string{"nope=1", "db-pause", "db-pause=-1", "db-pause=x"} {
		t.Setenv(envTrials, bad)
		if _, err := trialsConfig(); err == nil {
			t.Errorf("%s=%q: no error", envTrials, bad)
		}
	}
}

func TestRenderTable(t *testing.T) {
	out := renderTable([]trialResult{
		{fault: "db-pause", trial: 1, counts: counts{Accepted: 10, Applied: 10}, retryable: 2, recovery: 3 * time.Second},
		{fault: "worker-sigkill", trial: 1, counts: counts{Accepted: 10, Applied: 10, Twice: 4}, recovery: time.Second},
		{fault: "worker-sigkill", trial: 2, counts: counts{Accepted: 10, Applied: 9, Lost: 1, DeadApplied: 2}, recovery: 5 * time.Second},
	}, "test db", false, time.Minute)
	for _, want := range []string{
		"| worker-sigkill | 2 | 20 | 19 | 1 (0) | 4 | 0 | 2 | 5s / 5s | 0 | 0 |",
		"| db-pause | 1 | 10 | 10 | 0 (0) | 0 | 0 | 0 | 3s / 3s | 2 | 0 |",
		"database: test db",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "worker-sigkill") > strings.Index(out, "db-pause") {
		t.Errorf("rows not in the fault order:\n%s", out)
	}
}
