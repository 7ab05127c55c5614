package mergepatch

import (
	"context"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Name is the profile name clients send.
const Name = "merge-patch"

var _ ports.MergeProfile = Profile{}

// Profile is the built-in RFC 7396 JSON Merge Patch profile.
type Profile struct{}

// New returns the merge-patch profile.
func New() Profile { return Profile{} }

// Name implements ports.MergeProfile.
func (Profile) Name() string { return Name }

// ContentTypes implements ports.MergeProfile.
func (Profile) ContentTypes() []string {
	return []string{domain.ContentTypeJSON, domain.ContentTypeBSON}
}

// Merge implements ports.MergeProfile. The result keeps the current
// document's content type (the intent's when there is no document). Intents
// and documents are routed by content type:
//   - JSON intent, JSON or no document: RFC 7396 on JSON (MergeJSON).
//   - BSON intent, BSON or no document: RFC 7396 on BSON (MergeBSON).
//   - JSON intent, BSON document: the intent (a JSON object, read as MongoDB
//     relaxed Extended JSON) is converted to BSON first (JSONToBSON), which
//     suits clients such as grpcurl that cannot easily send BSON.
//   - BSON intent, JSON document: rejected.
func (Profile) Merge(_ context.Context, in ports.MergeInput) (domain.Document, error) {
	current, intent := in.Current, in.Intent
	fail := func(format string, args ...any) (domain.Document, error) {
		return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "merge-patch: "+format, args...)
	}
	curType := intent.ContentType
	var target []byte
	if current != nil {
		curType = current.ContentType
		target = current.Data
	}
	switch {
	case curType == domain.ContentTypeJSON && intent.ContentType == domain.ContentTypeJSON:
		out, err := MergeJSON(target, intent.Data)
		if err != nil {
			return fail("%v", err)
		}
		return domain.Document{ContentType: domain.ContentTypeJSON, Data: out}, nil
	case curType == domain.ContentTypeBSON && (intent.ContentType == domain.ContentTypeBSON || intent.ContentType == domain.ContentTypeJSON):
		patch := intent.Data
		if intent.ContentType == domain.ContentTypeJSON {
			var err error
			if patch, err = JSONToBSON(intent.Data); err != nil {
				return fail("cannot apply the %s intent to a %s document: %v", domain.ContentTypeJSON, domain.ContentTypeBSON, err)
			}
		}
		out, err := MergeBSON(target, patch)
		if err != nil {
			return fail("%v", err)
		}
		return domain.Document{ContentType: domain.ContentTypeBSON, Data: out}, nil
	default:
		return fail("cannot apply a %q intent to a %q document (supported: %s intents on %s documents, and %s intents on %s documents)",
			intent.ContentType, curType, domain.ContentTypeJSON, domain.ContentTypeJSON, "application/json or application/bson", domain.ContentTypeBSON)
	}
}
