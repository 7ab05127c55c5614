package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/kafkatest"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/internal/testkit/pgtest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// One process serves three stores: memory (the default, "primary"),
// PostgreSQL ("pg") and the MongoDB-wire server ("mongo"). A request that
// spans them gets one result per operation, each store's records land in
// its database (read back through the raw clients), an unknown store is a
// per-operation error naming the stores served, Scan and Count of each
// store see its records only, and queued mutations to both databases are
// applied by the worker to the right one.
func TestOneProcessServesSeveralStores(t *testing.T) {
	asyncSkipShort(t)
	pg := pgtest.Shared(t)
	pgDB := pg.NewDatabase(t)
	mongo := mongotest.Shared(t)
	brokers := kafkatest.InProcess(t, kafkatest.Topics(asyncTopic, asyncDLT))
	env := map[string]string{
		"SINK_MEMORY_STORE":   "primary",
		"SINK_POSTGRES_URL":   pgDB,
		"SINK_POSTGRES_STORE": "pg",
		"SINK_MONGODB_STORE":  "mongo",
	}
	for k, v := range mongo.SinkEnv() {
		env[k] = v
	}
	s := asyncStartAll(t, brokers, env)
	ns := mongotest.DatabaseName(t)
	at := func(store, key string) *sinkv1.RecordAddress {
		a := addr(ns, "multi", key)
		a.Store = store
		return a
	}
	bsonDoc := func(v int) *sinkv1.Document {
		b, err := bson.Marshal(bson.M{"v": v})
		if err != nil {
			t.Fatal(err)
		}
		return &sinkv1.Document{ContentType: domain.ContentTypeBSON, Data: b}
	}
	put := func(a *sinkv1.RecordAddress, d *sinkv1.Document) *sinkv1.WriteOperation {
		return &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{Address: a, Document: d}}}
	}
	merge := func(a *sinkv1.RecordAddress, patch string) *sinkv1.WriteOperation {
		return &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{Address: a, Profile: "merge-patch", Intent: jsonDoc(patch)}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := s.Client.Write(ctx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{
		put(at("", "k"), jsonDoc(`{"v":1}`)),       // the default store: memory
		put(at("pg", "k"), jsonDoc(`{"v":2}`)),     // same key, PostgreSQL
		put(at("mongo", "k"), bsonDoc(3)),          // same key, MongoDB
		merge(at("pg", "k"), `{"w":20}`),           // after the put of its record
		put(at("nowhere", "k"), jsonDoc(`{}`)),     // not served
		merge(at("mongo", "k"), `{"w":30}`),        //
		merge(at("primary", "k"), `{"w":10}`),      // the default store by name
		put(at("pg", "other"), jsonDoc(`{"v":9}`)), //
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.GetResults() {
		if i == 4 {
			e := r.GetError()
			if e.GetReason() != "INVALID_ARGUMENT" || !strings.Contains(e.GetMessage(), `"mongo", "pg", "primary"`) {
				t.Fatalf("the unknown store: %v", r)
			}
			continue
		}
		if r.GetStatus() != applied {
			t.Fatalf("operation %d: %v", i, r)
		}
	}
	read := func(store, key string) map[string]any {
		t.Helper()
		resp, err := s.Client.Read(ctx, &sinkv1.ReadRequest{Operations: []*sinkv1.ReadOperation{{Address: at(store, key)}}})
		if err != nil || resp.GetResults()[0].GetStatus() != found {
			t.Fatalf("read %s/%s: %v %v", store, key, err, resp)
		}
		d := resp.GetResults()[0].GetDocument()
		m := map[string]any{}
		if d.GetContentType() == domain.ContentTypeBSON {
			if err := bson.Unmarshal(d.GetData(), &m); err != nil {
				t.Fatal(err)
			}
			delete(m, "_id")
			for k, v := range m {
				m[k] = fmt.Sprint(v)
			}
			return m
		}
		if err := json.Unmarshal(d.GetData(), &m); err != nil {
			t.Fatal(err)
		}
		for k, v := range m {
			m[k] = fmt.Sprint(v)
		}
		return m
	}
	for _, c := range []struct {
		store, want string
	}{{"primary", "map[v:1 w:10]"}, {"pg", "map[v:2 w:20]"}, {"mongo", "map[v:3 w:30]"}} {
		if got := fmt.Sprint(read(c.store, "k")); got != c.want {
			t.Errorf("store %s: %s, want %s", c.store, got, c.want)
		}
	}
	// Scan and Count go to the dataset's store: each lists and counts its
	// own records only.
	for _, c := range []struct{ store, keys string }{{"primary", "k"}, {"pg", "k,other"}, {"mongo", "k"}} {
		ds := &sinkv1.DatasetRef{Store: c.store, Namespace: ns, Dataset: "multi"}
		pages, err := scanPages(t, s.Client, &sinkv1.ScanRequest{Dataset: ds, PageSize: 1})
		if err != nil {
			t.Fatalf("scan of store %s: %v", c.store, err)
		}
		if got := strings.Join(keysOf(pages), ","); got != c.keys {
			t.Errorf("scan of store %s: keys %s, want %s", c.store, got, c.keys)
		}
		n, err := s.Client.Count(ctx, &sinkv1.CountRequest{Dataset: ds, Where: "doc.v >= 1"})
		if want := uint64(strings.Count(c.keys, ",") + 1); err != nil || n.GetCount() != want || !n.GetExact() {
			t.Errorf("count of store %s: %v, %v; want exactly %d", c.store, n, err, want)
		}
	}

	// The rows are where they belong: PostgreSQL holds its two records
	// (and nothing of the others), whatever its table is called.
	if out := pgtest.PSQL(t, pgDB, "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname NOT IN ('pg_catalog','information_schema')"); strings.TrimSpace(out) != "1" {
		t.Fatalf("PostgreSQL has %q tables, want 1", out)
	}

	// Readiness checks the other stores too.
	if code, body, _ := opsGet("http://" + s.HTTPAddr + "/readyz"); code != 200 || !strings.Contains(body, "other stores: ok") {
		t.Fatalf("/readyz: %d %q", code, body)
	}

	// Queued mutations to both databases: the worker applies each to its
	// store.
	async, err := s.Client.Write(ctx, &sinkv1.WriteRequest{Completion: returnAccepted, Operations: []*sinkv1.WriteOperation{
		merge(at("pg", "k"), `{"q":"pg"}`), merge(at("mongo", "k"), `{"q":"mongo"}`), merge(at("", "k"), `{"q":"memory"}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range async.GetResults() {
		if r.GetStatus() != accepted {
			t.Fatalf("queued %d: %v", i, r)
		}
	}
	for _, c := range []struct{ store, want string }{{"pg", "pg"}, {"mongo", "mongo"}, {"primary", "memory"}} {
		eventually(t, 30*time.Second, "the worker to apply the queued merge of store "+c.store, func() (bool, string) {
			got := read(c.store, "k")
			return got["q"] == c.want, fmt.Sprint(got)
		})
	}
}
