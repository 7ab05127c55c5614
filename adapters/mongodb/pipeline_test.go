package mongodb_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/ports"
)

// updateStatements records the statements of the update commands a client
// sends: whether each is a pipeline, and whether its filter is a bare _id
// of an ObjectID (the store's question whether the server takes update
// pipelines; the tests use string keys) or of a string.
type updateStatements struct {
	mu                             sync.Mutex
	probes, pipelines, bareID, all int
}

func (u *updateStatements) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		if e.CommandName != "update" {
			return
		}
		stmts, err := bsoncore.Document(e.Command).LookupErr("updates")
		if err != nil {
			return
		}
		vals, _ := stmts.Array().Values()
		u.mu.Lock()
		defer u.mu.Unlock()
		for _, v := range vals {
			st := v.Document()
			q := st.Lookup("q").Document()
			els, _ := q.Elements()
			id, hasID := q.Lookup("_id"), len(els) == 1
			switch {
			case hasID && id.Type == bsoncore.TypeObjectID:
				u.probes++
				continue
			case hasID && id.Type == bsoncore.TypeString:
				u.bareID++
			}
			u.all++
			if st.Lookup("u").Type == bsoncore.TypeArray {
				u.pipelines++
			}
		}
	}}
}

func (u *updateStatements) get() (probes, pipelines, bareID, all int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.probes, u.pipelines, u.bareID, u.all
}

// A Store asks the server once whether it takes update pipelines (an
// update of an ObjectID _id that matches nothing), and its puts without a
// mark then use them with a bare _id filter, or, where the server refused
// (FerretDB v1), the filter that excludes records with a mark; either way
// they keep the records' marks. NoUpdatePipelines skips the question.
func TestUpdatePipelinesAskedOnce(t *testing.T) {
	srv := mongotest.Shared(t)
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoUpdatePipelines=%v", off), func(t *testing.T) {
			var u updateStatements
			mc, err := mongo.Connect(options.Client().ApplyURI(srv.URI()).SetMonitor(u.monitor()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = mc.Disconnect(context.Background()) })
			db := freshDatabase(t, mc)
			ctx := ctxT(t)
			opts := mongodb.Options{NoUpdatePipelines: off}
			if srv.IsFerretDB() {
				opts.BulkChunk, opts.BulkConcurrency = mongodb.FerretDBBulkChunk, mongodb.FerretDBBulkConcurrency
			}
			s := newStore(t, mc, opts)
			addr := func(i int) domain.Address {
				return domain.Address{Store: "primary", Namespace: db, Dataset: "things", Key: domain.StringKey(fmt.Sprintf("k%d", i))}
			}
			put := func(i int, cond ports.ConditionKind, mark bool) ports.WriteOp {
				op := ports.WriteOp{Kind: ports.WritePut, Address: addr(i), Document: bsonDoc(t, bson.D{{Key: "i", Value: i}}), Condition: ports.Condition{Kind: cond}}
				if mark {
					op.Mark = markOf([]string{fmt.Sprintf("m%d", i)}, domain.SourcePosition{Log: "l", Offset: int64(i)}, 8)
				}
				return op
			}
			write := func(ops ...ports.WriteOp) {
				t.Helper()
				for i, r := range s.Write(ctx, ops) {
					if r.Err != nil {
						t.Fatalf("op %d: %v", i, r.Err)
					}
				}
			}
			// Records 0-3 with a mark, 4-7 without.
			write(put(0, ports.ConditionNone, true), put(1, ports.ConditionNone, true), put(2, ports.ConditionNone, true), put(3, ports.ConditionNone, true))
			write(put(4, ports.ConditionNone, false), put(5, ports.ConditionNone, false), put(6, ports.ConditionNone, false), put(7, ports.ConditionNone, false))
			// Unmarked upserts (the bulk path) and replaces (one by one).
			write(put(0, ports.ConditionNone, false), put(1, ports.ConditionNone, false), put(4, ports.ConditionNone, false), put(5, ports.ConditionNone, false))
			write(put(2, ports.ConditionExists, false), put(6, ports.ConditionExists, false))
			write(put(3, ports.ConditionNone, false))

			probes, pipelines, bareID, all := u.get()
			t.Logf("server %s: %d probes; %d of %d update statements pipelines, %d with a bare _id filter", srv.Kind(), probes, pipelines, all, bareID)
			switch {
			case off && probes != 0:
				t.Fatalf("with NoUpdatePipelines the store asked the server %d times", probes)
			case !off && probes != 1:
				t.Fatalf("the store asked the server %d times whether it takes update pipelines, want once", probes)
			case off || srv.IsFerretDB():
				if pipelines != 0 {
					t.Fatalf("%d update statements are pipelines", pipelines)
				}
			case pipelines != 0:
				// A server that takes them (MongoDB 4.2 and later): every
				// unmarked put is a pipeline with a bare _id filter.
				if pipelines != 11 || bareID != 11 {
					t.Fatalf("%d pipelines, %d bare _id filters, want 11 of each", pipelines, bareID)
				}
			}
			// Every record kept what it had: the marked ones their mark.
			addrs := make([]domain.Address, 8)
			for i := range addrs {
				addrs[i] = addr(i)
			}
			for i, r := range s.Read(ctx, addrs) {
				wantMark := i < 4
				if r.Err != nil || !r.Found || (len(r.Record.Mark.Recent) == 1) != wantMark {
					t.Fatalf("record %d: %+v", i, r)
				}
				if wantMark && r.Record.Mark.Recent[0].ID != fmt.Sprintf("m%d", i) {
					t.Fatalf("record %d has mark %+v", i, r.Record.Mark)
				}
			}
		})
	}
}
