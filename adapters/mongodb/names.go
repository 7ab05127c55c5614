package mongodb

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/strictjson"
)

// Binding maps a logical namespace/dataset pair to an existing MongoDB
// database/collection pair (SINK_MONGODB_BINDINGS).
type Binding struct {
	Namespace  string `json:"namespace"`
	Dataset    string `json:"dataset"`
	Database   string `json:"database"`
	Collection string `json:"collection"`
}

// ParseBindings parses SINK_MONGODB_BINDINGS: a JSON array of objects with
// the string fields namespace, dataset, database and collection. An empty
// string means no bindings. Errors name the offending entry by its index.
func ParseBindings(s string) ([]Binding, error) {
	out, err := strictjson.Array[Binding](s, "SINK_MONGODB_BINDINGS", `{"namespace","dataset","database","collection"}`)
	if err != nil {
		return nil, err
	}
	if err := checkBindings(out); err != nil {
		return nil, err
	}
	return out, nil
}

// checkBindings validates bindings: every field is set, targets are names
// MongoDB can hold, and no logical pair or target is bound twice.
func checkBindings(bs []Binding) error {
	type pair struct{ a, b string }
	logical := map[pair]int{}
	target := map[pair]int{}
	for i, b := range bs {
		var missing []string
		for _, f := range []struct{ name, v string }{
			{"namespace", b.Namespace}, {"dataset", b.Dataset}, {"database", b.Database}, {"collection", b.Collection},
		} {
			if f.v == "" {
				missing = append(missing, f.name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("SINK_MONGODB_BINDINGS entry %d: missing or empty %s", i, strings.Join(missing, ", "))
		}
		if err := checkDatabaseName(b.Database); err != nil {
			return fmt.Errorf("SINK_MONGODB_BINDINGS entry %d: %w", i, err)
		}
		if err := checkCollectionName(b.Database, b.Collection); err != nil {
			return fmt.Errorf("SINK_MONGODB_BINDINGS entry %d: %w", i, err)
		}
		l := pair{b.Namespace, b.Dataset}
		if j, dup := logical[l]; dup {
			return fmt.Errorf("SINK_MONGODB_BINDINGS entry %d: namespace %q dataset %q is already bound by entry %d", i, b.Namespace, b.Dataset, j)
		}
		logical[l] = i
		t := pair{b.Database, b.Collection}
		if j, dup := target[t]; dup {
			return fmt.Errorf("SINK_MONGODB_BINDINGS entry %d: database %q collection %q is already the target of entry %d (one collection can back only one dataset)", i, b.Database, b.Collection, j)
		}
		target[t] = i
	}
	return nil
}

// maxDatabaseNameBytes is MongoDB's limit on database names.
const maxDatabaseNameBytes = 63

// maxNamespaceBytes is MongoDB's limit on "<database>.<collection>".
const maxNamespaceBytes = 255

// checkDatabaseName reports why MongoDB cannot hold a database of this name.
func checkDatabaseName(name string) error {
	switch {
	case name == "":
		return errors.New("database name must not be empty")
	case len(name) > maxDatabaseNameBytes:
		return fmt.Errorf("database name %q is %d bytes; MongoDB allows at most %d", name, len(name), maxDatabaseNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("database name %q is not valid UTF-8", name)
	}
	if i := strings.IndexAny(name, "/\\. \"$*<>:|?\x00"); i >= 0 {
		return fmt.Errorf("database name %q contains %q; MongoDB database names cannot contain any of / \\ . space \" $ * < > : | ? or NUL", name, name[i])
	}
	return nil
}

// checkCollectionName reports why MongoDB cannot hold a collection of this
// name in database db.
func checkCollectionName(db, name string) error {
	switch {
	case name == "":
		return errors.New("collection name must not be empty")
	case !utf8.ValidString(name):
		return fmt.Errorf("collection name %q is not valid UTF-8", name)
	case strings.ContainsRune(name, '$'):
		return fmt.Errorf("collection name %q contains '$', which MongoDB does not allow", name)
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("collection name %q contains NUL, which MongoDB does not allow", name)
	case strings.HasPrefix(name, "system."):
		return fmt.Errorf("collection name %q starts with \"system.\", which MongoDB reserves", name)
	case len(db)+1+len(name) > maxNamespaceBytes:
		return fmt.Errorf("namespace %q is %d bytes; MongoDB allows at most %d for database name, dot and collection name together", db+"."+name, len(db)+1+len(name), maxNamespaceBytes)
	}
	return nil
}

// systemDatabases are the databases MongoDB itself uses.
var systemDatabases = []string{"admin", "config", "local"}

// systemDatabase returns the system database name is, if any. The
// comparison ignores case: MongoDB refuses a database whose name differs
// from an existing one only in case (DatabaseDifferCase), and the system
// databases always exist, so "Admin" could only ever fail.
func systemDatabase(name string) string {
	for _, sys := range systemDatabases {
		if strings.EqualFold(name, sys) {
			return sys
		}
	}
	return ""
}

// target is the database/collection pair a dataset maps to.
type target struct {
	Database   string
	Collection string
}

func (t target) String() string { return t.Database + "." + t.Collection }

// mapper resolves logical datasets to MongoDB collections.
type mapper struct {
	bound map[[2]string]target // namespace/dataset -> target
	taken map[target][2]string // bound targets -> their logical pair
}

func newMapper(bs []Binding) (*mapper, error) {
	if err := checkBindings(bs); err != nil {
		return nil, err
	}
	m := &mapper{bound: map[[2]string]target{}, taken: map[target][2]string{}}
	for _, b := range bs {
		t := target{b.Database, b.Collection}
		m.bound[[2]string{b.Namespace, b.Dataset}] = t
		m.taken[t] = [2]string{b.Namespace, b.Dataset}
	}
	return m, nil
}

// resolve maps a dataset to its collection or explains why it cannot.
func (m *mapper) resolve(a domain.Address) (target, error) {
	if t, ok := m.bound[[2]string{a.Namespace, a.Dataset}]; ok {
		return t, nil
	}
	t := target{a.Namespace, a.Dataset}
	if sys := systemDatabase(t.Database); sys != "" {
		return target{}, fmt.Errorf("namespace %q would be MongoDB's system database %q, which Sink does not use unless SINK_MONGODB_BINDINGS binds a dataset to it", a.Namespace, sys)
	}
	if err := checkDatabaseName(t.Database); err != nil {
		return target{}, fmt.Errorf("namespace %q cannot be a MongoDB database: %w", a.Namespace, err)
	}
	if err := checkCollectionName(t.Database, t.Collection); err != nil {
		return target{}, fmt.Errorf("dataset %q cannot be a MongoDB collection: %w", a.Dataset, err)
	}
	if l, ok := m.taken[t]; ok {
		// Two logical names for one collection would give one record two
		// addresses, and with them two orders of operations.
		return target{}, fmt.Errorf("namespace %q dataset %q names collection %s, which SINK_MONGODB_BINDINGS binds to namespace %q dataset %q: use that name", a.Namespace, a.Dataset, t, l[0], l[1])
	}
	return t, nil
}
