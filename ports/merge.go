package ports

import (
	"context"

	"github.com/sink-io/sink/domain"
)

// MergeInput is what one merge works on.
type MergeInput struct {
	// Address is the record being merged.
	Address domain.Address
	// Current is the record's current document; nil when the record does not exist.
	Current *domain.Document
	// Intent is the client's merge intent.
	Intent domain.Document
	// Accept lists the content types the store can hold, preferred first;
	// empty means any. A profile that creates a record (Current is nil)
	// should produce one of them, converting the intent where it can.
	Accept []string
}

// MergeProfile is a named, deterministic read-modify-write function. The
// application calls it with the record's current document (nil when the
// record does not exist) and the client's intent, and writes the result with
// a revision precondition, calling it again on conflict. It must therefore be
// free of side effects and may be called several times for one merge; it
// never changes the bytes of its input's documents (the current one may
// be storage's own, shared with readers; see Storage.Read). Long work must
// stop when ctx is done.
type MergeProfile interface {
	// Name is the profile's unique name, as clients send it.
	Name() string
	// ContentTypes lists the document content types the profile understands.
	// The application rejects intents and current documents of other types
	// with an invalid-argument error before calling Merge.
	ContentTypes() []string
	// Merge returns the new document. Errors should be *domain.Error; a
	// CodeInvalidArgument error is final (the intent cannot be applied).
	// An error about the current document rather than the intent starts
	// its message with "current document: " (after the profile's name and
	// ": ", if any), so that the client is told which document is at fault.
	Merge(ctx context.Context, in MergeInput) (domain.Document, error)
}

// FingerprintedProfile is implemented by merge profiles whose definition
// can change without a change of name (profiles loaded from a file). The
// fingerprint identifies the definition; the asynchronous path records it
// with a queued merge, so that a worker can tell whether it applies the
// merge with the definition it was submitted under. Profiles written in Go
// need not implement it.
type FingerprintedProfile interface {
	Fingerprint() string
}

// ProfileOrigin is implemented by merge profiles that can say where they
// were defined (such as a file and line), for start-up messages.
type ProfileOrigin interface {
	Origin() string
}
