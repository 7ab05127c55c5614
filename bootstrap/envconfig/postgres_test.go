package envconfig

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPostgresConfig(t *testing.T) {
	c, err := Load(map[string]string{
		"SINK_POSTGRES_URL":               "postgres://u@db/sink",
		"SINK_POSTGRES_STORE":             "orders",
		"SINK_POSTGRES_POOL_SIZE":         "7",
		"SINK_POSTGRES_STATEMENT_TIMEOUT": "5s",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != "orders" || c.Application().Store != "orders" {
		t.Fatalf("SINK_POSTGRES_STORE alone does not name the process's store: %q", c.Store)
	}
	cc := c.PostgresConnection()
	if cc.URL != "postgres://u@db/sink" || cc.PoolSize != 7 || cc.StatementTimeout != 5*time.Second || cc.Setting != "SINK_POSTGRES_URL" {
		t.Fatalf("connection config %+v", cc)
	}
	if o, err := c.PostgresOptions(); err != nil || o.Store != "orders" {
		t.Fatalf("options %+v, %v", o, err)
	}
	if d := Defaults().Postgres; d.PoolSize < 1 || d.URL != "" {
		t.Fatalf("defaults %+v", d)
	}
}

func TestPostgresConfigProblems(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"SINK_POSTGRES_URL": "postgres://db/x", "SINK_MONGODB_URI": "mongodb://db/"}, `SINK_STORE="primary": that store is served by mongodb already`},
		{map[string]string{"SINK_POSTGRES_URL": "postgres://db/x", "SINK_POSTGRES_STORE": "a", "SINK_STORE": "b"}, `SINK_STORE="b": the default store is served by no database`},
		{map[string]string{"SINK_POSTGRES_POOL_SIZE": "-1"}, "SINK_POSTGRES_POOL_SIZE must be at least 1"},
		{map[string]string{"SINK_POSTGRES_STATEMENT_TIMEOUT": "-1s"}, "SINK_POSTGRES_STATEMENT_TIMEOUT must not be negative"},
		{map[string]string{"SINK_POSTGRES_BINDINGS": `[{"namespace":"a"}]`}, "SINK_POSTGRES_BINDINGS entry 0: missing"},
	} {
		_, err := Load(c.env)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a problem with %q", c.env, err, c.want)
		}
	}
	if _, err := Load(map[string]string{"SINK_POSTGRES_STORE": "same", "SINK_STORE": "same"}); err != nil {
		t.Fatalf("equal store names: %v", err)
	}
}

// docs/postgres.md's configuration table is generated from PostgresConfig
// (SectionTable); this test keeps them in step.
func TestPostgresDocsConfigTableMatchesConfig(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "postgres.md"))
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- config-table:begin -->\n", "<!-- config-table:end -->"
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatal("docs/postgres.md has no config-table markers")
	}
	want := SectionTable("docs/postgres.md")
	if got := s[i+len(begin) : j]; got != want {
		t.Fatalf("docs/postgres.md configuration table is out of date; replace it with:\n%s", want)
	}
	if !strings.Contains(want, "SINK_POSTGRES_URL") || strings.Contains(ConfigTable(), "SINK_POSTGRES_URL") {
		t.Fatal("the PostgreSQL settings belong to docs/postgres.md's table, not the README's")
	}
}

// One process serves one store per configured database (and a named
// memory store), the default first.
func TestSeveralStores(t *testing.T) {
	c, err := Load(map[string]string{"SINK_POSTGRES_URL": "postgres://db/x", "SINK_POSTGRES_STORE": "pg",
		"SINK_MONGODB_URI": "mongodb://db/", "SINK_MONGODB_STORE": "mongo", "SINK_MEMORY_STORE": "primary"})
	if err != nil {
		t.Fatal(err)
	}
	want := []StoreBinding{{"primary", StoreMemory}, {"mongo", StoreMongoDB}, {"pg", StorePostgres}}
	if got := c.Stores(); !slices.Equal(got, want) {
		t.Fatalf("stores %v, want %v", got, want)
	}
	if o, _ := c.PostgresOptions(); o.Store != "pg" {
		t.Fatalf("PostgreSQL store named %q", o.Store)
	}
	if o, _ := c.MongoDBOptions(); o.Store != "mongo" {
		t.Fatalf("MongoDB store named %q", o.Store)
	}
	// One database naming its store makes it the default.
	if c, err := Load(map[string]string{"SINK_POSTGRES_URL": "postgres://db/x", "SINK_POSTGRES_STORE": "orders"}); err != nil || c.Store != "orders" {
		t.Fatalf("default store %q, %v", c.Store, err)
	}
	// Two stores of one name, or a bad name, are refused.
	for _, env := range []map[string]string{
		{"SINK_MONGODB_URI": "mongodb://db/", "SINK_MEMORY_STORE": "primary"},
		{"SINK_MEMORY_STORE": strings.Repeat("s", 200)},
		{"SINK_MONGODB_URI": "mongodb://db/", "SINK_MONGODB_STORE": "\xff", "SINK_STORE": "\xff"},
	} {
		if _, err := Load(env); err == nil {
			t.Errorf("%v accepted", env)
		}
	}
}
