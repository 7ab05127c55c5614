package countprofile_test

import (
	"testing"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/internal/testkit/countprofile"
	"github.com/sink-io/sink/ports/mergetest"
)

func TestCountConformance(t *testing.T) {
	enc := func(ct string, v any) domain.Document {
		d, err := countprofile.Encode(ct, v)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	jcur := enc(domain.ContentTypeJSON, countprofile.Counter{N: 2, IDs: []string{"a"}})
	bcur := enc(domain.ContentTypeBSON, countprofile.Counter{N: 2, IDs: []string{"a"}})
	in := countprofile.Intent{Add: 1, ID: "b"}
	mergetest.Run(t, countprofile.New(), mergetest.Features{
		Valid: []mergetest.Case{
			{Name: "json into absent", Intent: enc(domain.ContentTypeJSON, in)},
			{Name: "bson into absent", Intent: enc(domain.ContentTypeBSON, in)},
			{Name: "json into json", Current: &jcur, Intent: enc(domain.ContentTypeJSON, in)},
			{Name: "bson into bson", Current: &bcur, Intent: enc(domain.ContentTypeBSON, in)},
			{Name: "json into bson", Current: &bcur, Intent: enc(domain.ContentTypeJSON, in)},
			{Name: "json into absent, BSON-only store", Intent: enc(domain.ContentTypeJSON, in), Accept: []string{domain.ContentTypeBSON}},
		},
		Invalid: []mergetest.Case{
			{Name: "add is not a number", Current: &jcur, Intent: domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"add":"x"}`)}},
		},
	})
}
