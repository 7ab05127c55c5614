package mergepatch

import (
	"context"
	"errors"
	"strings"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Name is the profile name clients send.
const Name = "merge-patch"

var _ ports.MergeProfile = Profile{}

// Profile is the built-in RFC 7396 JSON Merge Patch profile.
type Profile struct{ maxDepth int }

// Option configures the profile.
type Option func(*Profile)

// WithMaxDepth bounds the nesting of documents, intents and results: at
// most n levels of objects and arrays below the top level. n <= 0 means
// DefaultMaxDepth; values above MaxMaxDepth mean MaxMaxDepth. BSON
// documents are also held to MongoDB's own limit of 100 levels.
func WithMaxDepth(n int) Option { return func(p *Profile) { p.maxDepth = clampDepth(n) } }

// New returns the merge-patch profile; without options it has the default
// nesting limit.
func New(opts ...Option) Profile {
	p := Profile{maxDepth: DefaultMaxDepth}
	for _, o := range opts {
		o(&p)
	}
	return p
}

// Name implements ports.MergeProfile.
func (Profile) Name() string { return Name }

// ContentTypes implements ports.MergeProfile.
func (Profile) ContentTypes() []string {
	return []string{domain.ContentTypeJSON, domain.ContentTypeBSON}
}

// accepts reports whether a store that holds the content types accept
// (empty: any) can hold documents of media type mt.
func accepts(accept []string, mt string) bool {
	if len(accept) == 0 {
		return true
	}
	for _, a := range accept {
		if domain.IsMediaType(a, mt) {
			return true
		}
	}
	return false
}

// Merge implements ports.MergeProfile. The result keeps the current
// document's content type. Without a current document it has the intent's,
// unless the store does not accept that type (in.Accept) and the profile
// can convert: a JSON intent creates a BSON document in a BSON-only store.
// Intents and documents are routed by media type (parameters such as
// charset are ignored):
//   - JSON intent, JSON or no document: RFC 7396 on JSON (MergeJSON).
//   - BSON intent, BSON or no document: RFC 7396 on BSON (MergeBSON).
//   - JSON intent, BSON document (or none, in a BSON-only store): the
//     intent (a JSON object, read as MongoDB relaxed Extended JSON) is
//     converted to BSON first (JSONToBSON), which suits clients such as
//     grpcurl that cannot easily send BSON.
//   - BSON intent, JSON document: rejected.
func (p Profile) Merge(ctx context.Context, in ports.MergeInput) (domain.Document, error) {
	current, intent := in.Current, in.Intent
	r := newRun(ctx, p.maxDepth)
	fail := func(err error) (domain.Document, error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return domain.Document{}, err
		}
		return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "merge-patch: %v", err)
	}
	intentJSON := domain.IsMediaType(intent.ContentType, domain.ContentTypeJSON)
	intentBSON := domain.IsMediaType(intent.ContentType, domain.ContentTypeBSON)
	var (
		target  []byte
		outType string // the result's content type
		toBSON  bool   // the result is BSON
	)
	switch {
	case current != nil:
		target, outType = current.Data, current.ContentType
		toBSON = domain.IsMediaType(outType, domain.ContentTypeBSON)
		if !toBSON && !domain.IsMediaType(outType, domain.ContentTypeJSON) || !intentJSON && !intentBSON || intentBSON && !toBSON {
			return fail(inputErrorf("cannot apply a %q intent to a %q document (supported: %s intents on %s documents, and %s intents on %s documents)",
				intent.ContentType, current.ContentType, domain.ContentTypeJSON, domain.ContentTypeJSON, "application/json or application/bson", domain.ContentTypeBSON))
		}
	case intentBSON || intentJSON && accepts(in.Accept, domain.ContentTypeJSON):
		outType, toBSON = intent.ContentType, intentBSON
		if intentBSON && !accepts(in.Accept, domain.ContentTypeBSON) {
			return fail(inputErrorf("intent: the store holds only %s documents, and %s intents cannot be converted to them", strings.Join(in.Accept, ", "), domain.ContentTypeBSON))
		}
	case intentJSON && accepts(in.Accept, domain.ContentTypeBSON):
		outType, toBSON = domain.ContentTypeBSON, true
	case intentJSON:
		return fail(inputErrorf("intent: the store holds only %s documents, and %s intents cannot be converted to them", strings.Join(in.Accept, ", "), domain.ContentTypeJSON))
	default:
		return fail(inputErrorf("cannot apply a %q intent (supported: %s and %s)", intent.ContentType, domain.ContentTypeJSON, domain.ContentTypeBSON))
	}
	var (
		out []byte
		err error
	)
	if toBSON {
		patch := intent.Data
		if intentJSON {
			if patch, err = jsonToBSON(r, "intent", intent.Data); err != nil {
				return fail(err)
			}
		}
		out, err = mergeBSON(r, target, patch)
	} else {
		out, err = mergeJSON(r, target, intent.Data)
	}
	if err != nil {
		return fail(err)
	}
	return domain.Document{ContentType: outType, Data: out}, nil
}
