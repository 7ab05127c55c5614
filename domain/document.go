package domain

// Well-known content types.
const (
	ContentTypeJSON = "application/json"
	ContentTypeBSON = "application/bson"
)

// Document is an opaque record body with its content type. Sink never looks
// inside a document; storage adapters and merge profiles may, for the
// content types they declare.
type Document struct {
	ContentType string
	Data        []byte
}

// Revision is an opaque token naming one version of a record. Only the
// storage adapter that issued it interprets it; the empty revision means
// "none" (no precondition, or no record).
type Revision string

// IsZero reports whether the revision is empty.
func (r Revision) IsZero() bool { return r == "" }

// Record is a stored document with its revision.
type Record struct {
	Document Document
	Revision Revision
}
