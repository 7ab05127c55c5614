// Package bsonwire checks the BSON wire format strictly, all the way down,
// within MongoDB's nesting limit. It is shared by the adapters that handle
// application/bson documents (mongodb, mergepatch); the check itself is
// domain.ValidateBSON, which the application also runs on every
// application/bson document it accepts (with SINK_MAX_NESTING_DEPTH).
package bsonwire

import "github.com/sink-io/sink/domain"

// MaxNesting is MongoDB's limit on nested documents and arrays.
const MaxNesting = 100

// ErrTooDeep is matched (errors.Is) by the error Validate returns for
// documents nested more than MaxNesting levels deep. Callers report it as
// an invalid argument, like every other validation error.
var ErrTooDeep = domain.ErrTooDeep

// maxPathElements bounds the path in error messages.
const maxPathElements = domain.MaxBSONPathElements

// Validate checks that b is exactly one well-formed BSON document, all
// the way down (bsoncore's own Validate does not descend into embedded
// documents), nested at most MaxNesting levels deep. The work is linear in
// len(b). Errors never quote the document (see domain.ValidateBSON).
func Validate(b []byte) error { return domain.ValidateBSON(b, MaxNesting) }
