package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sink-io/sink/adapters/postgres"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/pgtest"
	"github.com/sink-io/sink/ports"
)

// The connection applies the pool size, the statement timeout and the
// application name; a statement the timeout stops is rolled back and fails
// with a retryable UNAVAILABLE (57014), without the password anywhere.
func TestConnectionSettingsAndStatementTimeout(t *testing.T) {
	url := pgtest.Shared(t).NewDatabase(t)
	conn, err := postgres.NewConnection(postgres.ConnectionConfig{URL: url, PoolSize: 3, StatementTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := conn.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Stop(context.Background()) })
	var timeout, app string
	if err := conn.Pool().QueryRow(ctx, "SELECT current_setting('statement_timeout'), current_setting('application_name')").Scan(&timeout, &app); err != nil {
		t.Fatal(err)
	}
	if timeout != "300ms" || app != "sink" || conn.PoolSize() != 3 {
		t.Fatalf("statement_timeout %q, application_name %q, pool size %d", timeout, app, conn.PoolSize())
	}
	if !strings.HasPrefix(conn.Hosts(), "127.0.0.1:") {
		t.Fatalf("hosts %q", conn.Hosts())
	}
	s := newStore(t, conn.Pool(), postgres.Options{Secrets: conn.Secrets()})
	a := domain.Address{Namespace: "ns", Dataset: "ds", Key: domain.StringKey("locked")}
	put := []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: jsonDoc(t, 1, nil)}}
	if r := s.Write(ctx, put)[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	// Another program holds the row's lock longer than the timeout.
	holder := poolFor(t, url, 1)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ns.ds FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	put[0].Document = jsonDoc(t, 2, nil)
	r := s.Write(ctx, put)[0]
	if domain.CodeOf(r.Err) != domain.CodeUnavailable || !domain.IsRetryable(r.Err) || !strings.Contains(r.Err.Error(), "57014") {
		t.Fatalf("write blocked past the statement timeout: %v (code %s), want a retryable UNAVAILABLE naming 57014", r.Err, domain.CodeOf(r.Err))
	}
	for _, f := range pgtest.Fragments {
		if strings.Contains(r.Err.Error(), f) {
			t.Fatalf("error shows a part of the password: %v", r.Err)
		}
	}
	_ = tx.Rollback(ctx)
	if got := s.Read(ctx, []domain.Address{a})[0]; got.Err != nil || counter(t, got.Record.Document) != 1 {
		t.Fatalf("the timed-out write changed the record: %+v", got)
	}
}
