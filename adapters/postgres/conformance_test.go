package postgres_test

import (
	"strings"
	"testing"

	"github.com/sink-io/sink/adapters/postgres"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
	"github.com/sink-io/sink/ports/storagetest"
)

func TestConformance(t *testing.T) {
	storagetest.Run(t, storagetest.Fixtures{
		// Every case gets a database of its own.
		NewStorage: func(t *testing.T) ports.Storage {
			p, _ := newPool(t, 8)
			return newStore(t, p, postgres.Options{})
		},
		NewConcurrentStorage: func(t *testing.T) ports.Storage {
			p, _ := newPool(t, 16)
			return newStore(t, p, postgres.Options{})
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
