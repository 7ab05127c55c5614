package mongotest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sink-io/sink/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { Main(m) }

// connect returns a database on the shared server, with a fresh name.
func connect(t *testing.T, uri string) (*mongo.Client, *mongo.Database) {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(10 * time.Second))
	if err != nil {
		t.Fatalf("connect %s: %v", uri, err)
	}
	db := client.Database(DatabaseName(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = db.Drop(ctx)
		_ = client.Disconnect(ctx)
	})
	return client, db
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var dbNameRe = regexp.MustCompile(`^[a-z0-9_]{1,38}$`)

func TestDatabaseName(t *testing.T) {
	seen := map[string]bool{}
	for range 3 {
		n := DatabaseName(t)
		if !dbNameRe.MatchString(n) {
			t.Fatalf("DatabaseName %q is not [a-z0-9_]{1,38}", n)
		}
		if seen[n] {
			t.Fatalf("DatabaseName repeated %q", n)
		}
		seen[n] = true
	}
	t.Run("A very long sub-test name / with Symbols ÄÖ and more than thirty-eight characters", func(t *testing.T) {
		n := DatabaseName(t)
		if !dbNameRe.MatchString(n) {
			t.Fatalf("DatabaseName %q is not [a-z0-9_]{1,38}", n)
		}
		if !strings.HasPrefix(n, "testdatabasename_a_very_long") {
			t.Fatalf("DatabaseName %q does not start with the sanitized test name", n)
		}
	})
}

func TestStartEnvURI(t *testing.T) {
	const uri = "mongodb://example.invalid:27017/?replicaSet=x"
	t.Setenv(EnvURI, uri)
	srv, err := Start(t.Context(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.Kind() != KindEnv || srv.URI() != uri || srv.URI() != uri || srv.IsFerretDB() {
		t.Fatalf("env server: kind=%q uri=%q concurrent=%q", srv.Kind(), srv.URI(), srv.URI())
	}
	if err := srv.Restart(); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("Restart on env server: %v, want not supported", err)
	}
	if err := srv.Stop(); err == nil {
		t.Fatal("Stop on env server: want an error")
	}
}

// TestDockerStepFallsThroughQuickly checks that, where Docker can't give a
// mongo:7 container, the Docker step gives up within seconds.
func TestDockerStepFallsThroughQuickly(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	t0 := time.Now()
	d, err := startDocker(t.Context(), t.Logf)
	if err == nil {
		t.Logf("Docker gave a server at %s; removing it", d.uri)
		if err := d.close(); err != nil {
			t.Fatal(err)
		}
		return
	}
	took := time.Since(t0)
	t.Logf("docker step failed after %s: %v", took, err)
	if took > 30*time.Second && !strings.Contains(err.Error(), "pull") {
		t.Fatalf("docker step took %s to fail", took)
	}
}

func TestPing(t *testing.T) {
	srv := Shared(t)
	client, _ := connect(t, srv.URI())
	var res bson.M
	if err := client.Database("admin").RunCommand(ctxT(t), bson.D{{Key: "ping", Value: 1}}).Decode(&res); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if ok, _ := res["ok"].(float64); ok != 1 {
		t.Fatalf("ping result %v", res)
	}
	if want := srv.Kind() == KindFerretDB; srv.IsFerretDB() != want {
		t.Fatal("IsFerretDB inconsistent with Kind")
	}
}

func TestIDTypes(t *testing.T) {
	_, db := connect(t, Shared(t).URI())
	ctx := ctxT(t)
	coll := db.Collection("ids")

	oid := bson.NewObjectID()
	ids := []any{
		bson.Binary{Subtype: 0, Data: []byte{0x00, 0x01, 0xfe, 0xff}},
		int64(1) << 40,
		oid,
	}
	for i, id := range ids {
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "n", Value: i}}); err != nil {
			t.Fatalf("insert _id %T: %v", id, err)
		}
	}
	for i, id := range ids {
		raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		if err != nil {
			t.Fatalf("find _id %T: %v", id, err)
		}
		if n := raw.Lookup("n").Int32(); n != int32(i) {
			t.Fatalf("find _id %T: n=%d, want %d", id, n, i)
		}
		switch id := id.(type) {
		case bson.Binary:
			sub, data := raw.Lookup("_id").Binary()
			if sub != 0 || string(data) != string(id.Data) {
				t.Fatalf("binary _id came back as subtype %d %x", sub, data)
			}
		case int64:
			if v, ok := raw.Lookup("_id").Int64OK(); !ok || v != id {
				t.Fatalf("int64 _id came back as %v", raw.Lookup("_id"))
			}
		case bson.ObjectID:
			if v, ok := raw.Lookup("_id").ObjectIDOK(); !ok || v != id {
				t.Fatalf("ObjectID _id came back as %v", raw.Lookup("_id"))
			}
		}
	}
	// int64 _id is found by an equal int32 key too (numbers compare by value).
	if n, err := coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: int64(1) << 40}}); err != nil || n != 1 {
		t.Fatalf("count int64 _id: %d %v", n, err)
	}
}

// TestRevisionCheckedReplace is the optimistic-concurrency pattern:
// ReplaceOne(filter {_id, "__sink.rev": rev}, upsert) creates, updates on a
// matching revision, and fails with a duplicate key error on a stale one.
func TestRevisionCheckedReplace(t *testing.T) {
	_, db := connect(t, Shared(t).URI())
	ctx := ctxT(t)
	coll := db.Collection("rev")
	id := bson.Binary{Subtype: 0, Data: []byte("key-1")}
	doc := func(rev int64, v string) bson.D {
		return bson.D{{Key: "_id", Value: id}, {Key: "v", Value: v}, {Key: "__sink", Value: bson.D{{Key: "rev", Value: rev}}}}
	}
	filter := func(rev int64) bson.D {
		return bson.D{{Key: "_id", Value: id}, {Key: "__sink.rev", Value: rev}}
	}
	upsert := options.Replace().SetUpsert(true)

	// Create: nothing matches rev 0, the upsert inserts with _id from the filter.
	res, err := coll.ReplaceOne(ctx, filter(0), doc(1, "a"), upsert)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if res.MatchedCount != 0 || res.UpsertedCount != 1 {
		t.Fatalf("create: %+v", res)
	}
	// Update on the current revision.
	res, err = coll.ReplaceOne(ctx, filter(1), doc(2, "b"), upsert)
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if res.MatchedCount != 1 || res.ModifiedCount != 1 || res.UpsertedCount != 0 {
		t.Fatalf("update: %+v", res)
	}
	// Stale revision: the upsert tries to insert the same _id.
	_, err = coll.ReplaceOne(ctx, filter(1), doc(2, "stale"), upsert)
	if !mongo.IsDuplicateKeyError(err) {
		t.Fatalf("stale revision: got %v, want duplicate key error", err)
	}
	var got struct {
		V    string `bson:"v"`
		Sink struct {
			Rev int64 `bson:"rev"`
		} `bson:"__sink"`
	}
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.V != "b" || got.Sink.Rev != 2 {
		t.Fatalf("after stale write: %+v", got)
	}
}

func TestExistsFalseFilter(t *testing.T) {
	_, db := connect(t, Shared(t).URI())
	ctx := ctxT(t)
	coll := db.Collection("exists")
	if _, err := coll.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "plain"}, {Key: "v", Value: 1}},
		bson.D{{Key: "_id", Value: "managed"}, {Key: "v", Value: 1}, {Key: "__sink", Value: bson.D{{Key: "rev", Value: int64(1)}}}},
	}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int64{"plain": 1, "managed": 0, "missing": 0} {
		n, err := coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: id}, {Key: "__sink", Value: bson.D{{Key: "$exists", Value: false}}}})
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("{_id:%q, __sink:{$exists:false}} matched %d, want %d", id, n, want)
		}
	}
	// The same filter works for a conditional replace (adopting an unmanaged document).
	res, err := coll.ReplaceOne(ctx,
		bson.D{{Key: "_id", Value: "plain"}, {Key: "__sink", Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: "v", Value: 2}, {Key: "__sink", Value: bson.D{{Key: "rev", Value: int64(1)}}}})
	if err != nil || res.MatchedCount != 1 || res.ModifiedCount != 1 {
		t.Fatalf("replace with $exists:false: %+v %v", res, err)
	}
}

func TestFindIn(t *testing.T) {
	_, db := connect(t, Shared(t).URI())
	ctx := ctxT(t)
	coll := db.Collection("in")
	var docs []any
	for i := range 10 {
		docs = append(docs, bson.D{{Key: "_id", Value: int64(i)}, {Key: "v", Value: i}})
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	cur, err := coll.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{int64(2), int64(5), int64(7), int64(42)}}}}},
		options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var got []struct {
		ID int64 `bson:"_id"`
	}
	if err := cur.All(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[{2} {5} {7}]" {
		t.Fatalf("$in found %v", got)
	}
}

func TestUnorderedBulkInsertDuplicate(t *testing.T) {
	_, db := connect(t, Shared(t).URI())
	ctx := ctxT(t)
	coll := db.Collection("bulk")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "exists"}}); err != nil {
		t.Fatal(err)
	}
	models := []mongo.WriteModel{
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: "a"}}),
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: "exists"}}), // dup of stored
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: "b"}}),
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: "a"}}), // dup within batch
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: "c"}}),
	}
	res, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) {
		t.Fatalf("BulkWrite: got %v, want BulkWriteException", err)
	}
	var idx []int
	for _, we := range bwe.WriteErrors {
		if we.Code != 11000 {
			t.Errorf("write error at %d: code %d (%s), want 11000", we.Index, we.Code, we.Message)
		}
		idx = append(idx, we.Index)
	}
	if fmt.Sprint(idx) != "[1 3]" {
		t.Fatalf("write errors at indexes %v, want [1 3]: %v", idx, err)
	}
	if res == nil || res.InsertedCount != 3 {
		t.Fatalf("inserted: %+v, want 3", res)
	}
	if n, _ := coll.CountDocuments(ctx, bson.D{}); n != 4 {
		t.Fatalf("collection has %d documents, want 4", n)
	}
}

func TestDeleteOne(t *testing.T) {
	_, db := connect(t, Shared(t).URI())
	ctx := ctxT(t)
	coll := db.Collection("del")
	if _, err := coll.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}}); err != nil {
		t.Fatal(err)
	}
	res, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: 1}})
	if err != nil || res.DeletedCount != 1 {
		t.Fatalf("DeleteOne: %+v %v", res, err)
	}
	res, err = coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: 1}})
	if err != nil || res.DeletedCount != 0 {
		t.Fatalf("second DeleteOne: %+v %v", res, err)
	}
	if n, _ := coll.CountDocuments(ctx, bson.D{}); n != 1 {
		t.Fatalf("%d documents left, want 1", n)
	}
}

func keys(raw bson.Raw) []string {
	els, _ := raw.Elements()
	var ks []string
	for _, e := range els {
		ks = append(ks, e.Key())
	}
	return ks
}

// TestFieldOrder records whether the server keeps the inserted field order and
// where it puts _id when the inserted document has it last.
func TestFieldOrder(t *testing.T) {
	srv := Shared(t)
	_, db := connect(t, srv.URI())
	ctx := ctxT(t)
	coll := db.Collection("order")

	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "z", Value: 1}, {Key: "a", Value: 2}, {Key: "m", Value: bson.D{{Key: "y", Value: 1}, {Key: "b", Value: 2}}}}); err != nil {
		t.Fatal(err)
	}
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: 1}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(keys(raw), ","); got != "_id,z,a,m" {
		t.Errorf("field order %s, want _id,z,a,m", got)
	}
	if got := strings.Join(keys(raw.Lookup("m").Document()), ","); got != "y,b" {
		t.Errorf("nested field order %s, want y,b", got)
	}

	if _, err := coll.InsertOne(ctx, bson.D{{Key: "z", Value: 1}, {Key: "a", Value: 2}, {Key: "_id", Value: 2}}); err != nil {
		t.Fatal(err)
	}
	raw, err = coll.FindOne(ctx, bson.D{{Key: "_id", Value: 2}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(keys(raw), ",")
	t.Logf("%s: inserted z,a,_id; read back %s", srv.Kind(), got)
	// MongoDB moves _id to the front on insert; FerretDB v1.24.2 does too.
	if got != "_id,z,a" {
		t.Errorf("_id-last insert read back as %s, want _id,z,a", got)
	}

	// Replacement documents without _id keep their order after the kept _id.
	if _, err := coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "q", Value: 1}, {Key: "c", Value: 2}}); err != nil {
		t.Fatal(err)
	}
	raw, err = coll.FindOne(ctx, bson.D{{Key: "_id", Value: 2}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(keys(raw), ","); got != "_id,q,c" {
		t.Errorf("replaced document read back as %s, want _id,q,c", got)
	}
}

// rmw runs workers x perWorker revision-checked increments of one counter,
// each worker through a client of its own, and returns the final counter
// value; every increment is retried until its conditional update matches.
func rmw(t *testing.T, uri string, workers, perWorker int) int64 {
	t.Helper()
	_, db := connect(t, uri)
	ctx := ctxT(t)
	if _, err := db.Collection("counter").InsertOne(ctx, bson.D{{Key: "_id", Value: "c"}, {Key: "n", Value: int64(0)}, {Key: "rev", Value: int64(0)}}); err != nil {
		t.Fatal(err)
	}
	colls := make([]*mongo.Collection, workers)
	for w := range colls {
		client, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
		colls[w] = client.Database(db.Name()).Collection("counter")
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for _, coll := range colls {
		wg.Go(func() {
			for range perWorker {
				for {
					var cur struct {
						N   int64 `bson:"n"`
						Rev int64 `bson:"rev"`
					}
					if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "c"}}).Decode(&cur); err != nil {
						errs <- err
						return
					}
					res, err := coll.UpdateOne(ctx,
						bson.D{{Key: "_id", Value: "c"}, {Key: "rev", Value: cur.Rev}},
						bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: cur.N + 1}, {Key: "rev", Value: cur.Rev + 1}}}})
					if err != nil {
						errs <- err
						return
					}
					if res.MatchedCount == 1 {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var final struct {
		N int64 `bson:"n"`
	}
	if err := db.Collection("counter").FindOne(ctx, bson.D{{Key: "_id", Value: "c"}}).Decode(&final); err != nil {
		t.Fatal(err)
	}
	return final.N
}

// TestConditionalWritesAreAtomic: revision-checked increments from
// concurrent clients, each with a normal connection pool, are never lost,
// as on MongoDB. On FerretDB this holds through the write gate of
// tools/ferretdb (without it, 16 x 100 increments ended near 100).
func TestConditionalWritesAreAtomic(t *testing.T) {
	srv := Shared(t)
	const workers, per = 8, 50
	t0 := time.Now()
	if n := rmw(t, srv.URI(), workers, per); n != workers*per {
		t.Fatalf("%s: counter %d after %d revision-checked increments: conditional updates lost some", srv.Kind(), n, workers*per)
	}
	t.Logf("%s: %d exact increments from %d clients in %s", srv.Kind(), workers*per, workers, time.Since(t0).Round(time.Millisecond))
}

// TestOrderedFalseUpdateBulk records how an unordered bulk of updates behaves
// when one update fails: MongoDB reports the failing index and applies the
// rest; FerretDB v1 ignores ordered:false for updates, stops at the first
// failing statement (earlier ones stay applied) and reports it at index 0.
func TestOrderedFalseUpdateBulk(t *testing.T) {
	srv := Shared(t)
	_, db := connect(t, srv.URI())
	ctx := ctxT(t)

	check := func(t *testing.T, coll *mongo.Collection, models []mongo.WriteModel, wantCode int, probe bson.D) {
		t.Helper()
		res, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		var bwe mongo.BulkWriteException
		if !errors.As(err, &bwe) || len(bwe.WriteErrors) != 1 {
			t.Fatalf("BulkWrite: %v, want exactly one write error", err)
		}
		we := bwe.WriteErrors[0]
		t.Logf("%s: write error index=%d code=%d (%s); result %+v", srv.Kind(), we.Index, we.Code, we.Message, res)
		if we.Code != wantCode {
			t.Errorf("code %d, want %d", we.Code, wantCode)
		}
		// The first update is applied everywhere.
		if n, _ := coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 1}}); n != 1 {
			t.Errorf("first update not applied")
		}
		lastApplied, _ := coll.CountDocuments(ctx, probe)
		wantIndex, wantLast := 1, int64(1) // MongoDB: right index, goes on after the error
		if srv.IsFerretDB() {
			wantIndex, wantLast = 0, 0 // FerretDB: index 0, stops at the error
		}
		if we.Index != wantIndex || lastApplied != wantLast {
			t.Errorf("%s: error index %d, last update applied %d; want %d, %d", srv.Kind(), we.Index, lastApplied, wantIndex, wantLast)
		}
	}

	t.Run("inc on string", func(t *testing.T) {
		coll := db.Collection("ubulk")
		if _, err := coll.InsertMany(ctx, []any{
			bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}},
			bson.D{{Key: "_id", Value: 2}, {Key: "n", Value: "text"}},
			bson.D{{Key: "_id", Value: 3}, {Key: "n", Value: 0}},
		}); err != nil {
			t.Fatal(err)
		}
		inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}
		check(t, coll, []mongo.WriteModel{
			mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 1}}).SetUpdate(inc),
			mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 2}}).SetUpdate(inc), // $inc on a string fails
			mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 3}}).SetUpdate(inc),
		}, 14, bson.D{{Key: "_id", Value: 3}, {Key: "n", Value: 1}})
	})

	t.Run("stale revision upsert", func(t *testing.T) {
		coll := db.Collection("rbulk")
		if _, err := coll.InsertMany(ctx, []any{
			bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}, {Key: "rev", Value: 1}},
			bson.D{{Key: "_id", Value: 2}, {Key: "n", Value: 0}, {Key: "rev", Value: 5}},
		}); err != nil {
			t.Fatal(err)
		}
		rep := func(id, rev int) mongo.WriteModel {
			return mongo.NewReplaceOneModel().SetUpsert(true).
				SetFilter(bson.D{{Key: "_id", Value: id}, {Key: "rev", Value: rev}}).
				SetReplacement(bson.D{{Key: "n", Value: 1}, {Key: "rev", Value: rev + 1}})
		}
		check(t, coll, []mongo.WriteModel{
			rep(1, 1), // matches
			rep(2, 1), // stale: the upsert collides with _id 2
			rep(3, 0), // new document
		}, 11000, bson.D{{Key: "_id", Value: 3}})
	})
}

// TestFerretDBFilterPushdown checks which find filters FerretDB pushes down
// to SQL; all others are evaluated in Go on a full collection scan.
//
// SQLite backend: pushdown happens only when the filter (after find drops
// dotted keys) is exactly {_id: <string or ObjectID>}.
//
// PostgreSQL backend: every top-level equality on a string, ObjectID,
// int64 (and other scalar) value is pushed down, and the rest (operators
// such as $exists or $in, binary values) is left to Go. So {_id: X,
// __sink: {$exists: false}} becomes the same SQL as {_id: X}. That SQL is
// a containment (_jsonb->'_id' @> X), which the btree _id index does not
// serve: PostgreSQL scans the table, but in SQL, without handing each row
// to FerretDB (the plan is logged).
func TestFerretDBFilterPushdown(t *testing.T) {
	srv := Shared(t)
	if !srv.IsFerretDB() {
		t.Skipf("FerretDB-only behaviour; server is %s", srv.Kind())
	}
	pg := srv.FerretDBBackend() == BackendPostgreSQL
	_, db := connect(t, srv.URI())
	ctx := ctxT(t)
	coll := db.Collection("pushdown")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "x"}, {Key: "k", Value: "v"}, {Key: "__sink", Value: bson.D{{Key: "rev", Value: int64(1)}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "k", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	bin := bson.Binary{Subtype: 0, Data: []byte("x")}
	type plan struct {
		Plan struct {
			NodeType string `bson:"Node Type"`
			Filter   string `bson:"Filter"`
		} `bson:"Plan"`
	}
	plans := map[string]plan{}
	for _, tc := range []struct {
		name         string
		filter       bson.D
		sqlite, pgre bool // pushed down on the SQLite and the PostgreSQL backend
	}{
		{"_id string", bson.D{{Key: "_id", Value: "x"}}, true, true},
		{"_id ObjectID", bson.D{{Key: "_id", Value: bson.NewObjectID()}}, true, true},
		{"_id binary", bson.D{{Key: "_id", Value: bin}}, false, false},
		{"_id int64", bson.D{{Key: "_id", Value: int64(7)}}, false, true},
		{"_id $in", bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: bson.A{"x", "y"}}}}}, false, false},
		{"_id + dotted rev", bson.D{{Key: "_id", Value: "x"}, {Key: "__sink.rev", Value: int64(1)}}, true, true},
		{"_id + $exists", bson.D{{Key: "_id", Value: "x"}, {Key: "__sink", Value: bson.D{{Key: "$exists", Value: false}}}}, false, true},
		{"indexed field", bson.D{{Key: "k", Value: "v"}}, false, true},
	} {
		var res struct {
			FilterPushdown bool     `bson:"filterPushdown"`
			QueryPlanner   bson.Raw `bson:"queryPlanner"`
		}
		err := db.RunCommand(ctx, bson.D{
			{Key: "explain", Value: bson.D{{Key: "find", Value: coll.Name()}, {Key: "filter", Value: tc.filter}}},
		}).Decode(&res)
		if err != nil {
			t.Fatalf("explain %s: %v", tc.name, err)
		}
		want := tc.sqlite
		if pg {
			want = tc.pgre
			var p plan
			if err := bson.Unmarshal(res.QueryPlanner, &p); err != nil {
				t.Fatalf("explain %s: queryPlanner: %v", tc.name, err)
			}
			plans[tc.name] = p
		}
		t.Logf("explain find %s: filterPushdown=%v", tc.name, res.FilterPushdown)
		if res.FilterPushdown != want {
			t.Errorf("explain find %s: filterPushdown=%v, want %v", tc.name, res.FilterPushdown, want)
		}
	}
	if pg {
		id, exists := plans["_id string"].Plan, plans["_id + $exists"].Plan
		t.Logf("PostgreSQL plan of {_id}: %s, filter %s", id.NodeType, id.Filter)
		if exists.Filter == "" || exists.Filter != id.Filter {
			t.Errorf("PostgreSQL filter of {_id, $exists: false} is %q, want that of {_id}: %q", exists.Filter, id.Filter)
		}
	}
}

// TestStopRestart checks the outage helpers on a server of its own.
func TestStopRestart(t *testing.T) {
	if Shared(t).Kind() != KindFerretDB {
		t.Skip("Restart is FerretDB-only")
	}
	srv, err := Start(t.Context(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	uri := srv.URI()
	client, db := connect(t, uri)
	ctx := ctxT(t)
	if _, err := db.Collection("c").InsertOne(ctx, bson.D{{Key: "_id", Value: "kept"}}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimSuffix(strings.TrimPrefix(uri, "mongodb://"), "/")
	if c, err := net.DialTimeout("tcp", host, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Stop", host)
	}
	shortCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = client.Ping(shortCtx, nil)
	cancel()
	if err == nil {
		t.Fatal("ping succeeded while stopped")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if srv.URI() != uri {
		t.Fatalf("URI changed across restart: %s -> %s", uri, srv.URI())
	}
	// The same client recovers and the data is still there.
	var doc bson.M
	if err := db.Collection("c").FindOne(ctx, bson.D{{Key: "_id", Value: "kept"}}).Decode(&doc); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	srv.Close()
	if c, err := net.DialTimeout("tcp", host, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Close", host)
	}
}

// TestFerretDBOnPostgreSQL starts FerretDB over a PostgreSQL server of its
// own (SINK_TEST_FERRETDB_BACKEND=postgresql), whose password needs
// escaping in a URL, writes and reads through it, and checks that Close
// stops PostgreSQL too.
func TestFerretDBOnPostgreSQL(t *testing.T) {
	if Shared(t).Kind() != KindFerretDB {
		t.Skip("the FerretDB fallback is not in use")
	}
	t.Setenv(EnvFerretDBBackend, BackendPostgreSQL)
	srv, err := Start(t.Context(), t.Logf)
	if errors.Is(err, pgtest.ErrNoBinaries) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.FerretDBBackend() != BackendPostgreSQL {
		t.Fatalf("backend %q, want %q", srv.FerretDBBackend(), BackendPostgreSQL)
	}
	_, db := connect(t, srv.URI())
	ctx := ctxT(t)
	if _, err := db.Collection("c").InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: int64(1)}}); err != nil {
		t.Fatal(err)
	}
	var got struct{ N int64 }
	if err := db.Collection("c").FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&got); err != nil || got.N != 1 {
		t.Fatalf("read back: %+v, %v", got, err)
	}
	pgAddr := srv.ferret.pg.Addr()
	srv.Close()
	if c, err := net.DialTimeout("tcp", pgAddr, time.Second); err == nil {
		c.Close()
		t.Fatalf("PostgreSQL still accepts connections on %s after Close", pgAddr)
	}
}

// TestFerretDBBadBackend checks that an unknown backend fails the start
// with a message naming the variable, instead of falling back.
func TestFerretDBBadBackend(t *testing.T) {
	t.Setenv(EnvURI, "")
	t.Setenv(EnvNoDocker, "1")
	t.Setenv(EnvFerretDBBackend, "mysql")
	srv, err := Start(t.Context(), t.Logf)
	if err == nil {
		srv.Close()
		t.Fatal("Start succeeded with an unknown backend")
	}
	if !strings.Contains(err.Error(), EnvFerretDBBackend) {
		t.Fatalf("error %q does not name %s", err, EnvFerretDBBackend)
	}
}
