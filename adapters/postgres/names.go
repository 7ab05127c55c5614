package postgres

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/strictjson"
)

// MaxIdentifierBytes is PostgreSQL's limit on a name (NAMEDATALEN-1). A
// longer namespace or dataset is refused: PostgreSQL would truncate it
// silently, and two long names with a common prefix would share a table.
const MaxIdentifierBytes = 63

// DefaultMetaColumn is the column a bound (legacy) table gets for Sink's
// per-row metadata (revision token, document hash, applied mark).
const DefaultMetaColumn = "sink_meta"

// Key column types of bound tables and the key kinds they hold.
const (
	KeyTypeBigint = "bigint" // int64 keys
	KeyTypeText   = "text"   // string keys
	KeyTypeUUID   = "uuid"   // bytes keys of 16 bytes
	KeyTypeBytea  = "bytea"  // bytes keys
)

// Document column types of bound tables.
const (
	DocTypeJSONB = "jsonb" // JSON; PostgreSQL normalises key order and whitespace
	DocTypeJSON  = "json"  // JSON, kept as written
	DocTypeText  = "text"  // UTF-8 text without NUL
	DocTypeBytea = "bytea" // any bytes
)

// Binding maps a logical namespace/dataset pair to an existing table
// (SINK_POSTGRES_BINDINGS): a key column and a document column.
type Binding struct {
	Namespace string `json:"namespace"`
	Dataset   string `json:"dataset"`
	Schema    string `json:"schema"`
	Table     string `json:"table"`
	// KeyColumn and KeyType: bigint, text, uuid or bytea.
	KeyColumn string `json:"key_column"`
	KeyType   string `json:"key_type"`
	// DocumentColumn and DocumentType: jsonb, json, text or bytea.
	DocumentColumn string `json:"document_column"`
	DocumentType   string `json:"document_type"`
	// ContentType of the documents (default application/json; with a
	// json or jsonb column it must be application/json).
	ContentType string `json:"content_type,omitempty"`
	// MetaColumn holds Sink's metadata (default sink_meta); Sink adds it
	// (ALTER TABLE … ADD COLUMN IF NOT EXISTS … bytea) at first use.
	MetaColumn string `json:"meta_column,omitempty"`
}

// ParseBindings parses SINK_POSTGRES_BINDINGS: a JSON array of Binding
// objects. An empty string means no bindings.
func ParseBindings(s string) ([]Binding, error) {
	out, err := strictjson.Array[Binding](s, "SINK_POSTGRES_BINDINGS", `{"namespace","dataset","schema","table","key_column","key_type","document_column","document_type"}`)
	if err != nil {
		return nil, err
	}
	if err := checkBindings(out); err != nil {
		return nil, err
	}
	return out, nil
}

func (b *Binding) setDefaults() {
	if b.ContentType == "" {
		b.ContentType = domain.ContentTypeJSON
	}
	if b.MetaColumn == "" {
		b.MetaColumn = DefaultMetaColumn
	}
}

func checkBindings(bs []Binding) error {
	type pair struct{ a, b string }
	logical := map[pair]int{}
	target := map[pair]int{}
	for i := range bs {
		b := bs[i]
		b.setDefaults()
		var missing []string
		for _, f := range []struct{ name, v string }{
			{"namespace", b.Namespace}, {"dataset", b.Dataset}, {"schema", b.Schema}, {"table", b.Table},
			{"key_column", b.KeyColumn}, {"key_type", b.KeyType}, {"document_column", b.DocumentColumn}, {"document_type", b.DocumentType},
		} {
			if f.v == "" {
				missing = append(missing, f.name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("SINK_POSTGRES_BINDINGS entry %d: missing or empty %s", i, strings.Join(missing, ", "))
		}
		for _, n := range []struct{ what, v string }{{"schema", b.Schema}, {"table", b.Table}, {"key_column", b.KeyColumn}, {"document_column", b.DocumentColumn}, {"meta_column", b.MetaColumn}} {
			if err := checkIdentifier(n.v); err != nil {
				return fmt.Errorf("SINK_POSTGRES_BINDINGS entry %d: %s: %w", i, n.what, err)
			}
		}
		switch b.KeyType {
		case KeyTypeBigint, KeyTypeText, KeyTypeUUID, KeyTypeBytea:
		default:
			return fmt.Errorf("SINK_POSTGRES_BINDINGS entry %d: key_type must be bigint, text, uuid or bytea, got %q", i, b.KeyType)
		}
		switch b.DocumentType {
		case DocTypeJSONB, DocTypeJSON:
			if !isJSONType(b.ContentType) {
				return fmt.Errorf("SINK_POSTGRES_BINDINGS entry %d: a %s document column holds application/json documents, not %q", i, b.DocumentType, b.ContentType)
			}
		case DocTypeText, DocTypeBytea:
		default:
			return fmt.Errorf("SINK_POSTGRES_BINDINGS entry %d: document_type must be jsonb, json, text or bytea, got %q", i, b.DocumentType)
		}
		if b.KeyColumn == b.DocumentColumn || b.MetaColumn == b.KeyColumn || b.MetaColumn == b.DocumentColumn {
			return fmt.Errorf("SINK_POSTGRES_BINDINGS entry %d: key_column, document_column and meta_column must be different columns", i)
		}
		l := pair{b.Namespace, b.Dataset}
		if j, dup := logical[l]; dup {
			return fmt.Errorf("SINK_POSTGRES_BINDINGS entry %d: namespace %q dataset %q is already bound by entry %d", i, b.Namespace, b.Dataset, j)
		}
		logical[l] = i
		t := pair{b.Schema, b.Table}
		if j, dup := target[t]; dup {
			return fmt.Errorf("SINK_POSTGRES_BINDINGS entry %d: table %q.%q is already the target of entry %d (one table can back only one dataset)", i, b.Schema, b.Table, j)
		}
		target[t] = i
	}
	return nil
}

func isJSONType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), domain.ContentTypeJSON)
}

// checkIdentifier reports why name cannot be a PostgreSQL identifier as is:
// empty, longer than 63 bytes, not UTF-8 or holding NUL. Any other
// character is fine: names are always quoted, so case, spaces, dots and
// quotes are kept exactly.
func checkIdentifier(name string) error {
	switch {
	case name == "":
		return errors.New("the name is empty")
	case len(name) > MaxIdentifierBytes:
		return fmt.Errorf("name %q is %d bytes; PostgreSQL names are at most %d bytes (Sink refuses longer names instead of letting PostgreSQL truncate them)", name, len(name), MaxIdentifierBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("name %q is not valid UTF-8", name)
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("name %q contains NUL", name)
	}
	return nil
}

// reservedSchema reports a schema name Sink never uses for a namespace:
// PostgreSQL's own (pg_catalog, pg_toast, pg_temp…: any pg_ prefix, in any
// case) and information_schema.
func reservedSchema(name string) bool {
	l := strings.ToLower(name)
	return strings.HasPrefix(l, "pg_") || l == "information_schema"
}

// target is the table a dataset maps to.
type target struct {
	Schema, Table string
	legacy        *Binding // nil: a table Sink owns
}

func (t target) String() string { return t.Schema + "." + t.Table }

// ident is the quoted, qualified table name for SQL.
func (t target) ident() string { return pgx.Identifier{t.Schema, t.Table}.Sanitize() }

// mapper resolves logical datasets to tables.
type mapper struct {
	bound map[[2]string]*Binding
	taken map[[2]string][2]string
}

func newMapper(bs []Binding) (*mapper, error) {
	if err := checkBindings(bs); err != nil {
		return nil, err
	}
	m := &mapper{bound: map[[2]string]*Binding{}, taken: map[[2]string][2]string{}}
	for i := range bs {
		b := bs[i]
		b.setDefaults()
		m.bound[[2]string{b.Namespace, b.Dataset}] = &b
		m.taken[[2]string{b.Schema, b.Table}] = [2]string{b.Namespace, b.Dataset}
	}
	return m, nil
}

// resolve maps an address's dataset to its table or explains why it
// cannot.
func (m *mapper) resolve(a domain.Address) (target, error) {
	if b, ok := m.bound[[2]string{a.Namespace, a.Dataset}]; ok {
		return target{Schema: b.Schema, Table: b.Table, legacy: b}, nil
	}
	if err := checkIdentifier(a.Namespace); err != nil {
		return target{}, fmt.Errorf("namespace %q cannot be a PostgreSQL schema: %w", a.Namespace, err)
	}
	if reservedSchema(a.Namespace) {
		return target{}, fmt.Errorf("namespace %q would be a PostgreSQL system schema (pg_* or information_schema), which Sink does not use", a.Namespace)
	}
	if err := checkIdentifier(a.Dataset); err != nil {
		return target{}, fmt.Errorf("dataset %q cannot be a PostgreSQL table: %w", a.Dataset, err)
	}
	if strings.HasPrefix(strings.ToLower(a.Dataset), "pg_") {
		return target{}, fmt.Errorf("dataset %q starts with pg_, which PostgreSQL reserves for system names", a.Dataset)
	}
	if l, ok := m.taken[[2]string{a.Namespace, a.Dataset}]; ok {
		return target{}, fmt.Errorf("namespace %q dataset %q names table %s.%s, which SINK_POSTGRES_BINDINGS binds to namespace %q dataset %q: use that name", a.Namespace, a.Dataset, a.Namespace, a.Dataset, l[0], l[1])
	}
	return target{Schema: a.Namespace, Table: a.Dataset}, nil
}
