package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sink-io/sink/adapters/postgres"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Servers that write the first record of a new dataset at the same time
// all succeed: CREATE SCHEMA/TABLE IF NOT EXISTS collide in the catalog
// (23505, 42P06, 42P07), and the store retries.
func TestTableCreationRace(t *testing.T) {
	const servers = 8
	_, url := newPool(t, 1)
	for round := 0; round < 3; round++ {
		ns := fmt.Sprintf("race%d", round)
		var wg sync.WaitGroup
		errs := make(chan error, servers)
		start := make(chan struct{})
		for i := 0; i < servers; i++ {
			s := newStore(t, poolFor(t, url, 2), postgres.Options{}) // a server of its own
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				a := domain.Address{Namespace: ns, Dataset: "new table", Key: domain.Int64Key(int64(i))}
				r := s.Write(context.Background(), []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: domain.Document{ContentType: "text/plain", Data: []byte("x")}}})[0]
				if r.Err != nil {
					errs <- r.Err
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: first writes of a new table from several servers: %v", round, err)
		}
		s := newStore(t, poolFor(t, url, 1), postgres.Options{})
		addrs := make([]domain.Address, servers)
		for i := range addrs {
			addrs[i] = domain.Address{Namespace: ns, Dataset: "new table", Key: domain.Int64Key(int64(i))}
		}
		for i, r := range s.Read(context.Background(), addrs) {
			if !r.Found {
				t.Fatalf("round %d: record %d missing", round, i)
			}
		}
	}
}

// A read of a dataset nobody wrote finds nothing and creates nothing.
func TestReadOfUnknownTableCreatesNothing(t *testing.T) {
	p, url := newPool(t, 2)
	s := newStore(t, p, postgres.Options{})
	r := s.Read(ctxT(t), []domain.Address{{Namespace: "nobody", Dataset: "wrote", Key: domain.StringKey("k")}})[0]
	if r.Err != nil || r.Found {
		t.Fatalf("read: %+v", r)
	}
	var n int
	if err := poolFor(t, url, 1).QueryRow(ctxT(t), "SELECT count(*) FROM pg_namespace WHERE nspname = 'nobody'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the read created schema nobody (%d, %v)", n, err)
	}
}

func attrs(sp sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range sp.Attributes() {
		m[kv.Key] = kv.Value.String()
	}
	return m
}

// Storage calls are client spans, children of the caller's span, named by
// their table; expected outcomes are counted, not errors.
func TestStorageCallsAreSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	p, _ := newPool(t, 2)
	s := newStore(t, p, postgres.Options{TracerProvider: tp})
	ctx, parent := tp.Tracer("test").Start(ctxT(t), "caller")
	a := domain.Address{Namespace: "ns", Dataset: "ds", Key: domain.StringKey("k")}
	doc := domain.Document{ContentType: "application/json", Data: []byte(`{}`)}
	s.Write(ctx, []ports.WriteOp{
		{Kind: ports.WritePut, Address: a, Document: doc},
		{Kind: ports.WritePut, Address: a, Document: doc, Condition: ports.Condition{Kind: ports.ConditionAbsent}},
	})
	s.Read(ctx, []domain.Address{a})
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	s.Read(canceled, []domain.Address{a})
	parent.End()
	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	for i, want := range []struct {
		name, op, size, failed string
		status                 codes.Code
	}{
		{"write ns.ds", "write", "2", "1", codes.Unset},
		{"read ns.ds", "read", "1", "", codes.Unset},
		{"read postgresql", "read", "1", "1", codes.Error},
	} {
		sp := spans[i]
		got := attrs(sp)
		if sp.Name() != want.name || sp.SpanKind() != trace.SpanKindClient || sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %d: %q kind %v parent %s", i, sp.Name(), sp.SpanKind(), sp.Parent().SpanID())
		}
		if got["db.system.name"] != "postgresql" || got["db.operation.name"] != want.op || got["db.operation.batch.size"] != want.size || got["sink.storage.failed_operations"] != want.failed {
			t.Errorf("span %d attributes %v", i, got)
		}
		if sp.Status().Code != want.status {
			t.Errorf("span %d status %v, want %v", i, sp.Status(), want.status)
		}
	}
}

// Revisions are never reused by different stores (processes) either.
func TestRevisionsDifferAcrossStores(t *testing.T) {
	p, _ := newPool(t, 2)
	a := domain.Address{Namespace: "ns", Dataset: "ds", Key: domain.StringKey("k")}
	seen := map[domain.Revision]bool{}
	for i := 0; i < 5; i++ {
		s := newStore(t, p, postgres.Options{})
		r := s.Write(ctxT(t), []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: domain.Document{ContentType: "x/y", Data: []byte{byte(i)}}}})[0]
		if r.Err != nil || seen[r.Revision] {
			t.Fatalf("write %d: %+v (revision seen before: %v)", i, r, seen[r.Revision])
		}
		seen[r.Revision] = true
		s.Write(ctxT(t), []ports.WriteOp{{Kind: ports.WriteDelete, Address: a}})
	}
}
