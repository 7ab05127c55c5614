package envconfig

import (
	"fmt"
	"slices"
	"unicode/utf8"
)

// StoreKind is the technology that holds a logical store.
type StoreKind string

// Store kinds.
const (
	StoreMemory   StoreKind = "memory"
	StoreMongoDB  StoreKind = "mongodb"
	StorePostgres StoreKind = "postgres"
)

// StoreBinding is one logical store a process serves and what holds it.
type StoreBinding struct {
	Name string
	Kind StoreKind
}

// Stores lists the stores the process serves, the default store
// (SINK_STORE) first: MongoDB serves SINK_MONGODB_STORE when
// SINK_MONGODB_URI is set, PostgreSQL SINK_POSTGRES_STORE when
// SINK_POSTGRES_URL is set (each defaults to SINK_STORE), memory
// SINK_MEMORY_STORE when it is set, and memory serves the default store
// when no database is configured at all.
func (c Config) Stores() []StoreBinding {
	var out []StoreBinding
	if c.MongoDB.URI != "" {
		out = append(out, StoreBinding{Name: or(c.MongoDB.Store, c.Store), Kind: StoreMongoDB})
	}
	if c.Postgres.Enabled() {
		out = append(out, StoreBinding{Name: or(c.Postgres.Store, c.Store), Kind: StorePostgres})
	}
	if c.MemoryStore != "" {
		out = append(out, StoreBinding{Name: c.MemoryStore, Kind: StoreMemory})
	}
	if len(out) == 0 {
		out = append(out, StoreBinding{Name: c.Store, Kind: StoreMemory})
	}
	slices.SortStableFunc(out, func(a, b StoreBinding) int {
		switch {
		case a.Name == c.Store && b.Name != c.Store:
			return -1
		case b.Name == c.Store && a.Name != c.Store:
			return 1
		}
		return 0
	})
	return out
}

func or(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

// defaultStore names the default store when SINK_STORE is not set and
// exactly one database names its store: then that store is the default.
func (c *Config) defaultStore(environ map[string]string) {
	if environ["SINK_STORE"] != "" {
		return
	}
	var named []string
	if c.MongoDB.URI != "" && c.MongoDB.Store != "" {
		named = append(named, c.MongoDB.Store)
	}
	if c.Postgres.Enabled() && c.Postgres.Store != "" {
		named = append(named, c.Postgres.Store)
	}
	if len(named) == 1 && c.MemoryStore == "" && !(c.MongoDB.URI != "" && c.Postgres.Enabled()) {
		c.Store = named[0]
	}
}

// validateStores checks that every store is served once, that each name
// is a valid store name, and that the default store is served.
func (c Config) validateStores() []error {
	var errs []error
	seen := map[string]StoreKind{}
	served := false
	for _, b := range c.Stores() {
		v := c.storeVariable(b)
		if !utf8.ValidString(b.Name) || b.Name == "" || (c.MaxNameLength > 0 && len(b.Name) > c.MaxNameLength) {
			errs = append(errs, fmt.Errorf("%s=%q: a store name must be valid UTF-8 of 1 to SINK_MAX_NAME_LENGTH (%d) bytes", v, b.Name, c.MaxNameLength))
		}
		if k, dup := seen[b.Name]; dup {
			errs = append(errs, fmt.Errorf("%s=%q: that store is served by %s already; give each database a store of its own (SINK_MONGODB_STORE, SINK_POSTGRES_STORE, SINK_MEMORY_STORE)", v, b.Name, k))
		}
		seen[b.Name] = b.Kind
		served = served || b.Name == c.Store
	}
	if !served {
		errs = append(errs, fmt.Errorf("SINK_STORE=%q: the default store is served by no database; name it in SINK_MONGODB_STORE, SINK_POSTGRES_STORE or SINK_MEMORY_STORE", c.Store))
	}
	return errs
}

// storeVariable names the setting that names the store of b.
func (c Config) storeVariable(b StoreBinding) string {
	switch {
	case b.Kind == StoreMongoDB && c.MongoDB.Store != "":
		return "SINK_MONGODB_STORE"
	case b.Kind == StorePostgres && c.Postgres.Store != "":
		return "SINK_POSTGRES_STORE"
	case b.Kind == StoreMemory && c.MemoryStore != "":
		return "SINK_MEMORY_STORE"
	}
	return "SINK_STORE"
}
