package mongodb_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sink-io/sink/adapters/memory"
	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
)

func TestScanConformance(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	parallel := 0
	if srv.IsFerretDB() {
		parallel = 2
	}
	storagetest.RunScan(t, storagetest.ScanFixtures{
		NewStorage:  func(t *testing.T) ports.Storage { return newStore(t, c, mongodb.Options{}) },
		Store:       "primary",
		Namespace:   func(t testing.TB) string { return freshDatabase(t, c) },
		Encode:      storagetest.EncodeBSON,
		MaxParallel: parallel,
	})
}

// TestScanDifferential: random documents × random filters scan alike on
// MongoDB (with what the adapter pushes down) and on the memory reference.
func TestScanDifferential(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	d := storagetest.Differential{Reference: memory.New(), Subject: newStore(t, c, mongodb.Options{}),
		Store: "primary", RefNamespace: "ref", Namespace: freshDatabase(t, c), Encode: storagetest.EncodeBSON}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if n := d.Run(ctx, t, 42, 5, 60, 400); n != 2000 {
		t.Fatalf("compared %d cases", n)
	}
}

// FuzzScanDifferential runs the differential test from fuzzed seeds
// (make fuzz).
func FuzzScanDifferential(f *testing.F) {
	f.Add(uint64(1))
	f.Add(uint64(99))
	f.Fuzz(func(t *testing.T, seed uint64) {
		srv := mongotest.Shared(t)
		c := client(t, srv.URI())
		d := storagetest.Differential{Reference: memory.New(), Subject: newStore(t, c, mongodb.Options{}),
			Store: "primary", RefNamespace: "ref", Namespace: freshDatabase(t, c), Encode: storagetest.EncodeBSON}
		d.Run(t.Context(), t, seed, 1, 30, 40)
	})
}

// TestScanLegacyAndHidden: records written without Sink are scanned
// (legacy), the hidden field never shows nor matches, and _ids no key
// can address are skipped without stopping the scan.
func TestScanLegacyAndHidden(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	db := freshDatabase(t, c)
	s := newStore(t, c, mongodb.Options{})
	coll := c.Database(db).Collection("legacy")
	docs := []any{
		bson.D{{Key: "_id", Value: int32(3)}, {Key: "v", Value: 1}},
		bson.D{{Key: "_id", Value: 2.5}, {Key: "v", Value: 1}}, // no key addresses it
		bson.D{{Key: "_id", Value: 2.0}, {Key: "v", Value: 1}},
		bson.D{{Key: "_id", Value: bson.Binary{Subtype: 4, Data: make([]byte, 16)}}, {Key: "v", Value: 1}},
		bson.D{{Key: "_id", Value: "s"}, {Key: "v", Value: 1}},
	}
	if _, err := coll.InsertMany(t.Context(), docs); err != nil {
		t.Fatal(err)
	}
	a := domain.Address{Store: "primary", Namespace: db, Dataset: "legacy", Key: domain.StringKey("t")}
	if r := s.Write(t.Context(), []ports.WriteOp{{Kind: ports.WritePut, Address: a, Document: bsonDoc(t, bson.D{{Key: "v", Value: 1}})}})[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	hidden := &domain.Filter{Op: domain.FilterExists, Path: []string{mongodb.DefaultHiddenField}, Exists: true}
	for _, limit := range []int{1, 2, 10} {
		keys, docs := storagetest.ScanAll(t.Context(), t, s, ports.ScanQuery{Dataset: a.DatasetRef(), Limit: limit, Filter: hidden}, nil)
		want := []domain.Key{domain.Int64Key(2), domain.Int64Key(3), domain.StringKey("s"), domain.StringKey("t")}
		if len(keys) != len(want) {
			t.Fatalf("limit %d: keys %v, want %v", limit, keys, want)
		}
		for i := range want {
			if !keys[i].Equal(want[i]) {
				t.Fatalf("limit %d: keys %v, want %v", limit, keys, want)
			}
			v, err := domain.DecodeDocument(docs[i])
			if err != nil {
				t.Fatal(err)
			}
			if hidden.Match(&v) {
				t.Fatalf("record %v shows the hidden field", keys[i])
			}
		}
	}
}

// TestScanPushesFilterDown: MongoDB evaluates what it can of the filter,
// so a selective filter returns only the matching records to Sink.
func TestScanPushesFilterDown(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	s := newStore(t, c, mongodb.Options{})
	d := domain.DatasetRef{Store: "primary", Namespace: freshDatabase(t, c), Dataset: "push"}
	var ops []ports.WriteOp
	for i := range 30 {
		ops = append(ops, ports.WriteOp{Kind: ports.WritePut, Address: domain.Address{Store: d.Store, Namespace: d.Namespace, Dataset: d.Dataset, Key: domain.Int64Key(int64(i))},
			Document: bsonDoc(t, bson.D{{Key: "n", Value: i}, {Key: "tags", Value: bson.A{bson.D{{Key: "t", Value: i % 3}}}}})})
	}
	for _, r := range s.Write(t.Context(), ops) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	f := &domain.Filter{Op: domain.FilterAnd, Children: []*domain.Filter{
		{Op: domain.FilterGte, Path: []string{"n"}, Value: domain.FloatValue(10)},
		{Op: domain.FilterEq, Path: []string{"tags", "t"}, Value: domain.IntValue(1)},
		{Op: domain.FilterNot, Children: []*domain.Filter{{Op: domain.FilterEq, Path: []string{"n"}, Value: domain.IntValue(13)}}},
	}}
	res, err := s.Scan(t.Context(), ports.ScanQuery{Dataset: d, Filter: f, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	// n in 10..29 with n%3 == 1: 10 13 16 19 22 25 28; not is not pushed
	// down, so 13 comes back for the application to reject.
	var got []int64
	for _, it := range res.Items {
		got = append(got, it.Key.Int64())
	}
	if want := []int64{10, 13, 16, 19, 22, 25, 28}; !res.Done || len(got) != len(want) || got[0] != 10 || got[6] != 28 {
		t.Fatalf("keys %v (done %v), want %v", got, res.Done, want)
	}
}
