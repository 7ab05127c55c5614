package domain

import (
	"context"
	"fmt"
	"strings"
)

// Right is a set of operations a principal may perform on a dataset.
type Right uint8

// Rights. A merge needs RightWrite (it reads the record only to write it).
const (
	RightRead   Right = 1 << iota // read records
	RightWrite                    // put and merge records
	RightDelete                   // delete records
)

// RightAll is every right.
const RightAll = RightRead | RightWrite | RightDelete

// ParseRight parses one right name: read, write or delete.
func ParseRight(s string) (Right, error) {
	switch s {
	case "read":
		return RightRead, nil
	case "write":
		return RightWrite, nil
	case "delete":
		return RightDelete, nil
	default:
		return 0, fmt.Errorf("unknown right %q (known: read, write, delete)", s)
	}
}

func (r Right) String() string {
	var names []string
	for _, x := range []struct {
		r    Right
		name string
	}{{RightRead, "read"}, {RightWrite, "write"}, {RightDelete, "delete"}} {
		if r&x.r != 0 {
			names = append(names, x.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// RightFor returns the right an operation of the given kind needs
// (a zero kind means a read).
func RightFor(kind MutationKind) Right {
	switch kind {
	case MutationPut, MutationMerge:
		return RightWrite
	case MutationDelete:
		return RightDelete
	default:
		return RightRead
	}
}

// Grant gives rights on the datasets its patterns match. A pattern is a
// literal name or contains '*' wildcards, each matching any run of
// characters (so "*" matches every name and "orders-*" every name starting
// with "orders-").
type Grant struct {
	Store     string
	Namespace string
	Dataset   string
	Rights    Right
}

// Matches reports whether the grant's patterns match the dataset.
func (g Grant) Matches(d DatasetRef) bool {
	return MatchPattern(g.Store, d.Store) && MatchPattern(g.Namespace, d.Namespace) && MatchPattern(g.Dataset, d.Dataset)
}

// MatchPattern reports whether name matches pattern, in which every '*'
// matches any (possibly empty) run of characters and everything else
// matches itself.
func MatchPattern(pattern, name string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == name
	}
	if !strings.HasPrefix(name, parts[0]) {
		return false
	}
	name = name[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(name, p)
		if i < 0 {
			return false
		}
		name = name[i+len(p):]
	}
	return len(name) >= len(last) && strings.HasSuffix(name, last)
}

// Principal is an authenticated caller and what it may do.
type Principal struct {
	// Name identifies the principal in logs and messages (never a secret).
	Name   string
	Grants []Grant
}

// Allows reports whether the principal holds right on the dataset.
func (p *Principal) Allows(d DatasetRef, right Right) bool {
	if p == nil {
		return false
	}
	for _, g := range p.Grants {
		if g.Rights&right == right && g.Matches(d) {
			return true
		}
	}
	return false
}

type principalKey struct{}

// WithPrincipal returns a context carrying the authenticated principal.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal carried by ctx, if any.
func PrincipalFrom(ctx context.Context) (*Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(*Principal)
	return p, ok && p != nil
}
