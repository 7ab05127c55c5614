// Package countprofile is a merge profile for tests whose merges are not
// idempotent, so that lost and doubled applications can be counted: it adds
// the intent's "add" to the document's "n" and appends the intent's "id" to
// its "ids".
//
//	current {"n":2,"ids":["a","b"]} + intent {"add":1,"id":"c"} = {"n":3,"ids":["a","b","c"]}
//
// It understands JSON and BSON (for MongoDB, which stores only BSON): the
// result has the current document's content type, or the intent's when the
// record does not exist.
package countprofile

import (
	"context"
	"encoding/json"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Name is the profile name.
const Name = "count"

// Counter is the document the profile maintains.
type Counter struct {
	N   int      `json:"n" bson:"n"`
	IDs []string `json:"ids,omitempty" bson:"ids,omitempty"`
}

// Intent is what a merge adds.
type Intent struct {
	Add int    `json:"add" bson:"add"`
	ID  string `json:"id" bson:"id"`
}

// Profile implements ports.MergeProfile.
type Profile struct{}

// New returns the profile.
func New() Profile { return Profile{} }

// Name implements ports.MergeProfile.
func (Profile) Name() string { return Name }

// ContentTypes implements ports.MergeProfile.
func (Profile) ContentTypes() []string {
	return []string{domain.ContentTypeJSON, domain.ContentTypeBSON}
}

// Merge implements ports.MergeProfile.
func (Profile) Merge(_ context.Context, input ports.MergeInput) (domain.Document, error) {
	cur, intent := input.Current, input.Intent
	var c Counter
	ct := intent.ContentType
	if cur == nil && len(input.Accept) > 0 && !accepts(input.Accept, ct) {
		// Create a type the store holds (JSON and BSON convert both ways).
		switch {
		case accepts(input.Accept, domain.ContentTypeBSON):
			ct = domain.ContentTypeBSON
		case accepts(input.Accept, domain.ContentTypeJSON):
			ct = domain.ContentTypeJSON
		default:
			return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "count: the store holds neither JSON nor BSON documents")
		}
	}
	if cur != nil {
		ct = cur.ContentType
		if err := Decode(*cur, &c); err != nil {
			return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "count: current document: %v", err)
		}
	}
	var in Intent
	if err := Decode(intent, &in); err != nil {
		return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "count: intent: %v", err)
	}
	c.N += in.Add
	if in.ID != "" {
		c.IDs = append(c.IDs, in.ID)
	}
	return Encode(ct, c)
}

func accepts(accept []string, mt string) bool {
	for _, a := range accept {
		if domain.IsMediaType(a, mt) {
			return true
		}
	}
	return false
}

// Decode decodes a JSON or BSON document into v.
func Decode(d domain.Document, v any) error {
	if d.ContentType == domain.ContentTypeBSON {
		return bson.Unmarshal(d.Data, v)
	}
	return json.Unmarshal(d.Data, v)
}

// Encode encodes v as a document of the content type (JSON or BSON).
func Encode(contentType string, v any) (domain.Document, error) {
	var b []byte
	var err error
	if contentType == domain.ContentTypeBSON {
		b, err = bson.Marshal(v)
	} else {
		contentType = domain.ContentTypeJSON
		b, err = json.Marshal(v)
	}
	if err != nil {
		return domain.Document{}, domain.Wrap(domain.CodeInternal, err, "count: cannot encode")
	}
	return domain.Document{ContentType: contentType, Data: b}, nil
}
