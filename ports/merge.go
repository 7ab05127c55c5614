package ports

import (
	"context"

	"github.com/sink-io/sink/domain"
)

// MergeProfile is a named, deterministic read-modify-write function. The
// application calls it with the record's current document (nil when the
// record does not exist) and the client's intent, and writes the result with
// a revision precondition, calling it again on conflict. It must therefore be
// free of side effects and may be called several times for one merge.
type MergeProfile interface {
	// Name is the profile's unique name, as clients send it.
	Name() string
	// ContentTypes lists the document content types the profile understands.
	// The application rejects intents and current documents of other types
	// with an invalid-argument error before calling Merge.
	ContentTypes() []string
	// Merge returns the new document. Errors should be *domain.Error; a
	// CodeInvalidArgument error is final (the intent cannot be applied).
	Merge(ctx context.Context, current *domain.Document, intent domain.Document) (domain.Document, error)
}
