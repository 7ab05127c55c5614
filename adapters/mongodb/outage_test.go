package mongodb_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/application"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/ports"
)

// TestOutageAndRecovery stops the database under a live Store, checks that
// every operation fails as retryable UNAVAILABLE, restarts the database and
// checks that the same Store (and client) works again by itself.
//
// A write sent on a pooled connection that the outage broke cannot know
// whether the server applied it (OUTCOME_UNKNOWN, see TestBulkOutcomes), so
// the first operation after the stop is a ping: its network error makes
// the driver clear the pool, and every later operation finds no server.
func TestOutageAndRecovery(t *testing.T) {
	if mongotest.Shared(t).Kind() != mongotest.KindFerretDB {
		t.Skip("stopping and restarting the server needs the FerretDB harness")
	}
	startCtx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv, err := mongotest.Start(startCtx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	// Timeouts come from the URI, as in production.
	c, err := mongo.Connect(options.Client().ApplyURI(srv.URI() + "?serverSelectionTimeoutMS=1000&connectTimeoutMS=1000"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	s := newStore(t, c, mongodb.Options{})
	svc := newService(t, s, nil)
	ctx := ctxT(t)
	a := domain.Address{Store: "primary", Namespace: "outage", Dataset: "things", Key: domain.StringKey("k")}
	b := domain.Address{Store: "primary", Namespace: "outage", Dataset: "things", Key: domain.StringKey("k2")}
	put := func(addr domain.Address, v string) ports.WriteOp {
		return ports.WriteOp{Kind: ports.WritePut, Address: addr, Document: bsonDoc(t, bson.D{{Key: "v", Value: v}})}
	}
	if r := s.Write(ctx, []ports.WriteOp{put(a, "before")})[0]; r.Err != nil {
		t.Fatalf("write before the outage: %v", r.Err)
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	unavailable := func(what string, err error) {
		t.Helper()
		e := domain.AsError(err)
		if e == nil || e.Code != domain.CodeUnavailable || !e.Retryable {
			t.Fatalf("%s during the outage: %v (code %s), want retryable UNAVAILABLE", what, err, domain.CodeOf(err))
		}
	}
	unavailable("ping", s.Ping(ctx))
	for i, r := range s.Write(ctx, []ports.WriteOp{
		put(a, "during"), // bulk upsert
		{Kind: ports.WritePut, Address: b, Document: bsonDoc(t, bson.D{}), Condition: ports.Condition{Kind: ports.ConditionExists}}, // single
		{Kind: ports.WriteDelete, Address: b}, // single delete
	}) {
		unavailable("write "+string(rune('0'+i)), r.Err)
	}
	for _, r := range s.Read(ctx, []domain.Address{a, b}) {
		unavailable("read", r.Err)
	}
	unavailable("ping", s.Ping(ctx))
	res, err := svc.Write(ctx, []domain.Mutation{{Kind: domain.MutationPut, Address: a, Document: bsonDoc(t, bson.D{{Key: "v", Value: "svc"}})}}, application.WaitUntilApplied)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != application.StatusFailed {
		t.Fatalf("service write during the outage: %s", res[0].Status)
	}
	unavailable("service write", res[0].Err)

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for attempt := 0; ; attempt++ {
		r := s.Write(ctx, []ports.WriteOp{put(a, "after")})[0]
		if r.Err == nil {
			t.Logf("recovered after %d failed attempts", attempt)
			break
		}
		last = r.Err
		if !domain.IsRetryable(r.Err) {
			t.Fatalf("non-retryable error while recovering: %v", r.Err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery within 60s: %v", last)
		}
		time.Sleep(100 * time.Millisecond) // backoff between polls
	}
	got := s.Read(ctx, []domain.Address{a})[0]
	if got.Err != nil || !got.Found || bson.Raw(got.Record.Document.Data).Lookup("v").StringValue() != "after" {
		t.Fatalf("read after recovery: %+v", got)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping after recovery: %v", err)
	}
}
