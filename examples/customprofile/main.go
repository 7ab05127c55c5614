// Command customprofile is an example of a custom Sink binary: the stock
// Sink plus one merge profile of its own, registered through the fx group
// that bootstrap.MergeProfile feeds.
//
// The "tally" profile counts events: its intent {"event": "click", "by": 2}
// adds 2 to counts.click of an application/json document.
package main

import (
	"context"
	"encoding/json"
	"os"

	"github.com/sink-io/sink/bootstrap"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// Tally is a merge profile that adds to named counters.
type Tally struct{}

// NewTally is the profile's plain constructor (no fx in it).
func NewTally() Tally { return Tally{} }

// Name implements ports.MergeProfile.
func (Tally) Name() string { return "tally" }

// ContentTypes implements ports.MergeProfile.
func (Tally) ContentTypes() []string { return []string{domain.ContentTypeJSON} }

// Merge implements ports.MergeProfile.
func (Tally) Merge(_ context.Context, input ports.MergeInput) (domain.Document, error) {
	current, intent := input.Current, input.Intent
	var state struct {
		Counts map[string]int64 `json:"counts"`
	}
	if current == nil && !accepts(input.Accept, domain.ContentTypeJSON) {
		return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "tally: the store does not hold %s documents", domain.ContentTypeJSON)
	}
	if current != nil {
		if err := json.Unmarshal(current.Data, &state); err != nil {
			return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, "tally: the current document is not a tally: %v", err)
		}
	}
	var in struct {
		Event string `json:"event"`
		By    *int64 `json:"by"`
	}
	if err := json.Unmarshal(intent.Data, &in); err != nil || in.Event == "" {
		return domain.Document{}, domain.Errorf(domain.CodeInvalidArgument, `tally: the intent must look like {"event":"name","by":1}`)
	}
	by := int64(1)
	if in.By != nil {
		by = *in.By
	}
	if state.Counts == nil {
		state.Counts = map[string]int64{}
	}
	state.Counts[in.Event] += by
	out, err := json.Marshal(state)
	if err != nil {
		return domain.Document{}, err
	}
	return domain.Document{ContentType: domain.ContentTypeJSON, Data: out}, nil
}

// accepts reports whether a store holding the content types accept (empty:
// any) can hold documents of media type mt.
func accepts(accept []string, mt string) bool {
	for _, a := range accept {
		if domain.IsMediaType(a, mt) {
			return true
		}
	}
	return len(accept) == 0
}

func main() {
	os.Exit(bootstrap.Main(os.Args[1:], bootstrap.MergeProfile(NewTally)))
}
