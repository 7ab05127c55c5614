package faults

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/internal/testkit/pgtest"
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
	got, err := trialsConfig(dbMongo)
	if err != nil {
		t.Fatal(err)
	}
	if got["worker-sigkill"] != 20 || got["db-pause"] != 5 || got["broker-restart"] != 2 || got["db-kill"] != 0 || got["db-connections"] != 0 {
		t.Errorf("trials %v", got)
	}
	// PostgreSQL: the database faults and worker kills by default.
	t.Setenv(envTrials, "db-kill=5")
	if got, err = trialsConfig(dbPostgres); err != nil {
		t.Fatal(err)
	}
	if got["db-kill"] != 5 || got["db-connections"] != 3 || got["db-pause"] != 3 || got["worker-sigkill"] != 3 || got["broker-restart"] != 0 {
		t.Errorf("postgres trials %v", got)
	}
	for _, bad := range []string{"nope=1", "db-pause", "db-pause=-1", "db-pause=x"} {
		t.Setenv(envTrials, bad)
		if _, err := trialsConfig(dbMongo); err == nil {
			t.Errorf("%s=%q: no error", envTrials, bad)
		}
	}
}

func TestRenderTable(t *testing.T) {
	out := renderTable([]trialResult{
		{fault: "db-pause", trial: 1, counts: counts{Accepted: 10, Applied: 10}, retryable: 2, recovery: 3 * time.Second},
		{fault: "worker-sigkill", trial: 1, counts: counts{Accepted: 10, Applied: 10, Twice: 4}, recovery: time.Second},
		{fault: "worker-sigkill", trial: 2, counts: counts{Accepted: 10, Applied: 9, Lost: 1, DeadApplied: 2}, recovery: 5 * time.Second},
		{fault: "db-connections", na: true},
	}, "test db", false, time.Minute)
	for _, want := range []string{
		"Database: test db\n",
		"| db-connections | n/a |",
		"- db-connections: pg_terminate_backend",
		"| worker-sigkill | 2 | 20 | 19 | 1 (0) | 4 | 0 | 2 | 5s / 5s | 0 | 0 |",
		"| db-pause | 1 | 10 | 10 | 0 (0) | 0 | 0 | 0 | 3s / 3s | 2 | 0 |",
		"database: test db",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "| worker-sigkill") > strings.Index(out, "| db-pause") || strings.Index(out, "| db-pause") > strings.Index(out, "| db-connections") {
		t.Errorf("rows not in the fault order:\n%s", out)
	}
	if strings.Contains(out, "| db-kill") {
		t.Errorf("a row for a fault that did not run:\n%s", out)
	}
}

func TestFaultsDB(t *testing.T) {
	for v, want := range map[string]string{"": dbMongo, "mongo": dbMongo, "postgres": dbPostgres, "postgresql": dbPostgres} {
		t.Setenv(envDB, v)
		if got, err := faultsDB(); err != nil || got != want {
			t.Errorf("%s=%q: got %q, %v; want %q", envDB, v, got, err, want)
		}
	}
	t.Setenv(envDB, "oracle")
	if _, err := faultsDB(); err == nil {
		t.Errorf("%s=oracle: no error", envDB)
	}
}

// The URL the Sink containers get carries the password percent-encoded and
// parses back to it.
func TestPostgresURLs(t *testing.T) {
	for _, raw := range []string{pgSinkURL(), pgAdminURL(5432, "postgres")} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("%v", err)
		}
		if pw, _ := u.User.Password(); pw != pgtest.Password || u.User.Username() != pgtest.User {
			t.Errorf("%s: user info does not parse back", pgScrub(errors.New(raw)))
		}
		if strings.Contains(raw, pgtest.Password) {
			t.Errorf("the password is not encoded in %s", pgScrub(errors.New(raw)))
		}
	}
	if s := pgScrub(errors.New("x " + pgtest.Password + " " + url.QueryEscape(pgtest.Password))); strings.Contains(s, pgtest.Fragments[0]) {
		t.Errorf("pgScrub left a part of the password: %s", s)
	}
}

func TestParseLdd(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n" +
		"\tlibpq.so.5 => /lib/x86_64-linux-gnu/libpq.so.5 (0x00007f1)\n" +
		"\tlibmissing.so.1 => not found\n" +
		"\t/lib64/ld-linux-x86-64.so.2 (0x00007f2)\n"
	got := parseLdd([]byte(out))
	want := []string{"/lib/x86_64-linux-gnu/libpq.so.5", "/lib64/ld-linux-x86-64.so.2"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("parseLdd: got %v, want %v", got, want)
	}
}
