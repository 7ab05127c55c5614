package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/internal/testkit/sinktest"
	sinkv1 "github.com/sink-io/sink/proto/sink/v1"
)

// 16 clients × 200 merges through the declarative counter profile of
// examples/profiles.yaml on one record: no update is lost or doubled, on
// memory and on MongoDB storage (where the BSON counter stays an int64).
func TestDeclarativeCounterConcurrentMerges(t *testing.T) {
	for _, storage := range []string{"memory", "mongodb"} {
		t.Run(storage, func(t *testing.T) {
			env := map[string]string{"SINK_MERGE_PROFILES_FILE": "../examples/profiles.yaml"}
			ns := "n"
			if storage == "mongodb" {
				if testing.Short() {
					t.Skip("starts a MongoDB-wire server; skipped with -short")
				}
				srv := mongotest.Shared(t)
				for k, v := range srv.SinkEnv() {
					env[k] = v
				}
				ns = mongotest.DatabaseName(t)
			}
			s := sinktest.Start(t, env)
			a := addr(ns, "d", "counter")
			const clients, merges = 16, 200
			var wg sync.WaitGroup
			errs := make(chan string, clients)
			start := time.Now()
			for c := 0; c < clients; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < merges; i++ {
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						resp, err := s.Client.Write(ctx, &sinkv1.WriteRequest{Operations: []*sinkv1.WriteOperation{mergeOp(a, "counter", `{"by":1}`)}})
						cancel()
						if err != nil {
							errs <- err.Error()
							return
						}
						if r := resp.Results[0]; r.Status != applied {
							errs <- fmt.Sprintf("%v %v", r.Status, r.Error)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Fatal(e)
			}
			t.Logf("%d×%d declarative merges in %s", clients, merges, time.Since(start).Round(time.Millisecond))
			doc := read(t, s.Client, a)[0].GetDocument()
			var n, count any
			switch doc.GetContentType() {
			case "application/json":
				var v struct{ N, Merges int64 }
				if err := json.Unmarshal(doc.GetData(), &v); err != nil {
					t.Fatal(err)
				}
				n, count = v.N, v.Merges
			case "application/bson":
				raw := bson.Raw(doc.GetData())
				n, count = raw.Lookup("n").Int64(), raw.Lookup("merges").Int64() // int64: panics on another type
			default:
				t.Fatalf("content type %q", doc.GetContentType())
			}
			if n != int64(clients*merges) || count != int64(clients*merges) {
				t.Fatalf("n = %v, merges = %v, want %d each (lost or doubled updates)", n, count, clients*merges)
			}
		})
	}
}
