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
func (Profile) ContentTypes() []string { return []string{domain.ContentTypeJSON} }

// Merge implements ports.MergeProfile. The result keeps the current
// document's content type (the intent's when there is no document).
func (Profile) Merge(_ context.Context, current *domain.Document, intent domain.Document) (domain.Document, error) {
	var target []byte
	if current != nil {
		target = current.Data
	}
	out, err := MergeJSON(target, intent.Data)
	if err != nil {
		return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "merge-patch: %v", err)
	}
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: out}, nil
}
