package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sink-io/sink/adapters/postgres"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newPool returns a pool over a fresh database of the shared server,
// closed when the test ends, and the database's URL.
func newPool(t testing.TB, maxConns int) (*pgxpool.Pool, string) {
	t.Helper()
	url := pgtest.Shared(t).NewDatabase(t)
	return poolFor(t, url, maxConns), url
}

func poolFor(t testing.TB, url string, maxConns int) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(maxConns)
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func newStore(t testing.TB, p *pgxpool.Pool, opts postgres.Options) *postgres.Store {
	t.Helper()
	s, err := postgres.New(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

type counterDoc struct {
	N       int    `json:"n"`
	Payload []byte `json:"payload,omitempty"`
}

func jsonDoc(t testing.TB, n int, payload []byte) domain.Document {
	b, err := json.Marshal(counterDoc{N: n, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: b}
}

func counter(t testing.TB, d domain.Document) int {
	var c counterDoc
	if err := json.Unmarshal(d.Data, &c); err != nil {
		t.Fatalf("decode %q: %v", d.Data, err)
	}
	return c.N
}
