package main

import (
	"testing"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports/mergetest"
)

func TestTallyConformance(t *testing.T) {
	js := func(s string) domain.Document {
		return domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(s)}
	}
	cur := js(`{"counts":{"click":2}}`)
	mergetest.Run(t, NewTally(), mergetest.Features{
		Valid: []mergetest.Case{
			{Name: "first event", Intent: js(`{"event":"click"}`)},
			{Name: "add to a count", Current: &cur, Intent: js(`{"event":"click","by":3}`)},
			{Name: "new count", Current: &cur, Intent: js(`{"event":"view","by":1}`), Accept: []string{domain.ContentTypeJSON}},
		},
		Invalid: []mergetest.Case{
			{Name: "no event", Current: &cur, Intent: js(`{"by":1}`)},
			{Name: "current not a tally", Current: &domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(`{"counts":"x"}`)}, Intent: js(`{"event":"a"}`)},
		},
	})
}
