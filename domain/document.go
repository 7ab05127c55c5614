package domain

import "encoding/base64"

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
// "none" (no precondition, or no record). A revision may hold any bytes (a
// client sends whatever it likes as an expected revision): code that needs
// the token itself uses string(r) or []byte(r); messages use String.
type Revision string

// IsZero reports whether the revision is empty.
func (r Revision) IsZero() bool { return r == "" }

// String renders the revision for messages and logs in standard base64, the
// form in which clients see bytes fields (proto JSON, grpcurl, the sink
// CLI). The result is always valid UTF-8, so formatting a revision with %s
// or %v can never put raw client bytes into a message.
func (r Revision) String() string { return base64.StdEncoding.EncodeToString([]byte(r)) }

// Record is a stored document with its revision and its applied mark (part
// of the record's hidden metadata; never shown to clients).
type Record struct {
	Document Document
	Revision Revision
	Mark     AppliedMark
}
