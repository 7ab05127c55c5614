package mongodb_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sink-io/sink/adapters/mongodb"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/mongotest"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

// clients holds one client per URI for the whole test binary, as a Sink
// process holds one for all its roles.
var clients struct {
	mu sync.Mutex
	m  map[string]*mongo.Client
}

func client(t testing.TB, uri string) *mongo.Client {
	t.Helper()
	clients.mu.Lock()
	defer clients.mu.Unlock()
	if c, ok := clients.m[uri]; ok {
		return c
	}
	c, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatalf("cannot connect to %s: %v", uri, err)
	}
	if clients.m == nil {
		clients.m = map[string]*mongo.Client{}
	}
	clients.m[uri] = c
	return c
}

// freshDatabase returns a new database name that is dropped after the test.
func freshDatabase(t testing.TB, c *mongo.Client) string {
	t.Helper()
	name := mongotest.DatabaseName(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Database(name).Drop(ctx); err != nil {
			t.Logf("cannot drop database %s: %v", name, err)
		}
	})
	return name
}

// newStore returns a store over c. Against the harness's FerretDB server it
// uses the bulk limits FerretDB needs (see mongodb.FerretDBBulkChunk).
func newStore(t testing.TB, c *mongo.Client, opts mongodb.Options) *mongodb.Store {
	t.Helper()
	if opts.BulkChunk == 0 && isServerClient(c) && mongotest.Shared(t).IsFerretDB() {
		opts.BulkChunk, opts.BulkConcurrency = mongodb.FerretDBBulkChunk, mongodb.FerretDBBulkConcurrency
	}
	s, err := mongodb.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// isServerClient reports whether c is connected to the test server (not an
// offline client of the validation tests).
func isServerClient(c *mongo.Client) bool {
	clients.mu.Lock()
	defer clients.mu.Unlock()
	for _, sc := range clients.m {
		if sc == c {
			return true
		}
	}
	return false
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func bsonDoc(t testing.TB, v any) domain.Document {
	return domain.Document{ContentType: domain.ContentTypeBSON, Data: mustMarshal(t, v)}
}
