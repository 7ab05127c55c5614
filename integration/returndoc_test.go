package integration_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sink-io/sink/adapters/mergepatch"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// return_document on each storage: the document a put or merge returns is
// byte for byte what a read of the record returns right after, at the
// revision the write returned (JSON on memory, BSON on the MongoDB-wire
// test server).
func TestReturnedDocumentIsWhatStorageHolds(t *testing.T) {
	bsonDoc := func(t *testing.T, d bson.D) *sinkv1.Document {
		b, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return &sinkv1.Document{ContentType: domain.ContentTypeBSON, Data: b}
	}
	for _, tc := range []struct {
		name string
		env  func(t *testing.T) (map[string]string, string)
	}{
		{"memory", func(*testing.T) (map[string]string, string) { return nil, "ns" }},
		{"mongodb", func(t *testing.T) (map[string]string, string) {
			if testing.Short() {
				t.Skip("starts a MongoDB-wire server; skipped with -short")
			}
			return mongotest.Shared(t).SinkEnv(), mongotest.DatabaseName(t)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, ns := tc.env(t)
			s := sinktest.Start(t, env)
			docs := map[string]*sinkv1.Document{"json": jsonDoc(`{"a":1,"list":[1,2]}`)}
			if tc.name == "mongodb" { // MongoDB holds BSON only
				docs = map[string]*sinkv1.Document{"bson": bsonDoc(t, bson.D{{Key: "a", Value: int32(1)}, {Key: "when", Value: bson.DateTime(1700000000000)}})}
			}
			for kind, doc := range docs {
				a := addr(ns, "returndoc", kind)
				put := &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Put{Put: &sinkv1.PutOperation{Address: a, Document: doc, ReturnDocument: true}}}
				merge := &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{
					Address: a, Profile: mergepatch.Name, Intent: jsonDoc(`{"b":"x"}`), ReturnDocument: true}}}
				for i, op := range []*sinkv1.WriteOperation{put, merge} {
					w := write(t, s.Client, op)[0]
					if w.GetStatus() != applied || w.GetDocument() == nil {
						t.Fatalf("%s op %d: %v", kind, i, w)
					}
					r := read(t, s.Client, a)[0]
					if !bytes.Equal(r.GetDocument().GetData(), w.GetDocument().GetData()) || r.GetDocument().GetContentType() != w.GetDocument().GetContentType() ||
						!bytes.Equal(r.GetRevision(), w.GetRevision()) {
						t.Fatalf("%s op %d returned %s %q at %x; a read gives %s %q at %x", kind, i,
							w.GetDocument().GetContentType(), w.GetDocument().GetData(), w.GetRevision(),
							r.GetDocument().GetContentType(), r.GetDocument().GetData(), r.GetRevision())
					}
				}
			}
		})
	}
}

// Concurrent merges of one record through the whole server (natural
// batching folds them): each returned document is the state right after
// that merge, so the 16 merges, each adding its own field, return states
// of 1, 2, …, 16 fields, and the last one is what a read returns.
func TestConcurrentMergesReturnTheirOwnState(t *testing.T) {
	s := sinktest.Start(t, nil)
	const n = 16
	a := addr("ns", "returndoc", "hot")
	fields := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := write(t, s.Client, &sinkv1.WriteOperation{Kind: &sinkv1.WriteOperation_Merge{Merge: &sinkv1.MergeOperation{
				Address: a, Profile: mergepatch.Name, Intent: jsonDoc(fmt.Sprintf(`{"c%d":%d}`, i, i)), ReturnDocument: true}}})[0]
			var m map[string]int
			if err := json.Unmarshal(w.GetDocument().GetData(), &m); err != nil {
				t.Errorf("merge %d returned %q: %v", i, w.GetDocument().GetData(), err)
			}
			if m[fmt.Sprint("c", i)] != i {
				t.Errorf("merge %d returned %v, without its own field", i, m)
			}
			fields <- len(m)
		}()
	}
	wg.Wait()
	close(fields)
	var got []int
	for f := range fields {
		got = append(got, f)
	}
	slices.Sort(got)
	for i, f := range got {
		if f != i+1 {
			t.Fatalf("returned states have %v fields, want 1, 2, …, %d", got, n)
		}
	}
}
