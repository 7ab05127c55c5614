package postgres_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sink-io/sink/adapters/postgres"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/pgtest"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
)

func TestConformance(t *testing.T) { conformance(t, "") }

// TestConformanceSimpleProtocol runs the suite over pgx's simple protocol
// (as behind a statement-pooling proxy): the server sends every column as
// text, so reads take the Scan path instead of the raw binary one.
func TestConformanceSimpleProtocol(t *testing.T) {
	conformance(t, "default_query_exec_mode=simple_protocol")
}

func conformance(t *testing.T, params string) {
	pool := func(t *testing.T, n int) *pgxpool.Pool {
		url := pgtest.Shared(t).NewDatabase(t)
		if params != "" {
			url += map[bool]string{true: "&", false: "?"}[strings.Contains(url, "?")] + params
		}
		return poolFor(t, url, n)
	}
	storagetest.Run(t, storagetest.Fixtures{
		// Every case gets a database of its own.
		NewStorage: func(t *testing.T) ports.Storage {
			return newStore(t, pool(t, 8), postgres.Options{})
		},
		NewConcurrentStorage: func(t *testing.T) ports.Storage {
			return newStore(t, pool(t, 16), postgres.Options{})
		},
		// A server that refuses connections: every call fails as a whole.
		Broken: func(t *testing.T, _ ports.Storage) ports.Storage {
			return newStore(t, poolFor(t, "postgres://sink:x@127.0.0.1:1/db?sslmode=disable&connect_timeout=2", 2), postgres.Options{})
		},
		Store:     "primary",
		Namespace: func(testing.TB) string { return "Test Namespace.x" },
		NewDocument: func(t testing.TB, _ domain.Address, n int, payload []byte) domain.Document {
			return jsonDoc(t, n, payload)
		},
		Counter: counter,
		EmptyDocument: func(testing.TB, domain.Address) domain.Document {
			return domain.Document{ContentType: "application/octet-stream"}
		},
		MaxParallel: 4,
	}, storagetest.Features{
		InvalidNamespaces: []string{"pg_catalog", "information_schema", "PG_toast", "pg_temp", strings.Repeat("n", 64), "nul\x00", "bad\xff"},
		InvalidDatasets:   []string{"pg_class", strings.Repeat("d", 64), ""},
	})
}
