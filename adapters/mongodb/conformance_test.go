package mongodb_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mongotest"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
)

func TestConformance(t *testing.T) {
	srv := mongotest.Shared(t)
	c := client(t, srv.URI())
	// The test FerretDB lets one write through at a time (its write gate
	// makes conditional writes atomic, see mongotest); keep the
	// concurrency test short there. Real MongoDB runs the defaults.
	// FerretDB also stops answering when about 100 documents are modified
	// at once (see FerretDBBulkChunk): two cases at a time stay under that
	// with its bulks of 48.
	writers, merges, parallel := 0, 0, 0
	if srv.IsFerretDB() {
		writers, merges, parallel = 8, 100, 2
	}
	storagetest.Run(t, storagetest.Fixtures{
		NewStorage: func(t *testing.T) ports.Storage { return newStore(t, c, mongodb.Options{}) },
		NewConcurrentStorage: func(t *testing.T) ports.Storage {
			return newStore(t, client(t, srv.URI()), mongodb.Options{})
		},
		Broken: func(t *testing.T, _ ports.Storage) ports.Storage {
			return newStore(t, silentClient(t), mongodb.Options{})
		},
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
		MaxParallel: parallel,
		InvalidDocuments: func(t testing.TB, _ domain.Address) []domain.Document {
			return []domain.Document{
				{ContentType: domain.ContentTypeBSON, Data: []byte{9, 0, 0}}, // truncated
				bsonDoc(t, bson.D{{Key: mongodb.DefaultHiddenField, Value: int32(1)}}),
				bsonDoc(t, bson.D{{Key: "_id", Value: bson.NewObjectID()}}), // not a's key
			}
		},
	}, storagetest.Features{
		MaxDocumentBytes:  mongodb.MaxDocumentBytes,
		LargePayloadBytes: 4 << 20,
		InvalidNamespaces: []string{"admin", "has.dot", "has space", strings.Repeat("n", 64)},
		InvalidDatasets:   []string{"system.views", "has$dollar"},
		ConcurrentWriters: writers,
		MergesPerWriter:   merges,
	})
}

// silentClient returns a client of a server that accepts connections and
// never answers: every operation fails once server selection gives up.
func silentClient(t *testing.T) *mongo.Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	c, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + l.Addr().String() + "/?directConnection=true&serverSelectionTimeoutMS=200&connectTimeoutMS=200"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	return c
}
