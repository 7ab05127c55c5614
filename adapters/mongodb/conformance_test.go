package mongodb_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/integration/mongotest"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
)

func TestConformance(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	// FerretDB serialises the concurrency test on one connection (see
	// ConcurrentURI); keep it short there. Real MongoDB runs the defaults.
	writers, merges := 0, 0
	if srv.IsFerretDB() {
		writers, merges = 8, 100
	}
	storagetest.Run(t, func(t *testing.T) ports.Storage {
		return newStore(t, c, mongodb.Options{})
	}, storagetest.Features{
		Store:     "primary",
		Namespace: func(t testing.TB) string { return freshDatabase(t, c) },
		// Documents without _id: the adapter adds it for storage and
		// leaves it out on reads, so they round-trip byte for byte.
		NewDocument: func(t testing.TB, _ domain.Address, n int, payload []byte) domain.Document {
			return bsonDoc(t, bson.D{
				{Key: "n", Value: int64(n)},
				{Key: "payload", Value: bson.Binary{Data: payload}},
			})
		},
		Counter: func(t testing.TB, d domain.Document) int {
			if d.ContentType != domain.ContentTypeBSON {
				t.Fatalf("content type %q", d.ContentType)
			}
			v, err := bson.Raw(d.Data).LookupErr("n")
			if err != nil {
				t.Fatalf("document %v has no counter: %v", bson.Raw(d.Data), err)
			}
			return int(v.Int64())
		},
		EmptyDocument: func(t testing.TB, _ domain.Address) domain.Document {
			return bsonDoc(t, bson.D{})
		},
		LargePayloadBytes: 4 << 20,
		KeyKinds:          storagetest.AllKeyKinds,
		ConcurrentWriters: writers,
		MergesPerWriter:   merges,
		NewConcurrentStorage: func(t *testing.T) ports.Storage {
			return newStore(t, client(t, srv.ConcurrentURI()), mongodb.Options{})
		},
	})
}
