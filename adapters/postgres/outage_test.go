package postgres_test

import (
	"testing"

	"github.com/sink-io/sink/adapters/postgres"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Killed connections (pg_terminate_backend, SQLSTATE 57P01 or a closed
// socket) fail the calls that used them with a retryable UNAVAILABLE,
// never INTERNAL or a condition, and the pool recovers by itself: the next
// call succeeds and the records are as the successful calls left them.
func TestTerminatedConnections(t *testing.T) {
	p, url := newPool(t, 2)
	s := newStore(t, p, postgres.Options{})
	admin := poolFor(t, url, 1)
	ctx := ctxT(t)
	a := domain.Address{Namespace: "ns", Dataset: "ds", Key: domain.StringKey("k")}
	doc := func(n int) domain.Document { return jsonDoc(t, n, nil) }
	want := 0
	if r := s.Write(ctx, []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: doc(0)}})[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	failures := 0
	for round := 1; round <= 10; round++ {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("round %d: no connection of the store to terminate", round)
		}
		ops := []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: doc(round)}}
		if round%2 == 0 { // the locked path too
			ops[0].Mark = &ports.MarkUpdate{IDs: []string{"m" + string(rune('a'+round))}, Keep: 4}
		}
		r := s.Write(ctx, ops)[0]
		switch {
		case r.Err == nil:
			want = round
		case domain.CodeOf(r.Err) == domain.CodeUnavailable && domain.IsRetryable(r.Err):
			failures++
			// Retry, as the application does with a retryable error.
			if r = s.Write(ctx, ops)[0]; r.Err != nil {
				t.Fatalf("round %d: retry after a terminated connection: %v", round, r.Err)
			}
			want = round
		default:
			t.Fatalf("round %d: write on a terminated connection: %v (code %s), want success or a retryable UNAVAILABLE", round, r.Err, domain.CodeOf(r.Err))
		}
		rr := s.Read(ctx, []domain.Address{a})[0]
		if rr.Err != nil {
			if domain.CodeOf(rr.Err) != domain.CodeUnavailable {
				t.Fatalf("round %d: read: %v", round, rr.Err)
			}
			rr = s.Read(ctx, []domain.Address{a})[0]
		}
		if rr.Err != nil || !rr.Found || counter(t, rr.Record.Document) != want {
			t.Fatalf("round %d: read %+v, want counter %d", round, rr, want)
		}
	}
	t.Logf("%d of 10 writes met a terminated connection (retryable UNAVAILABLE)", failures)
}
