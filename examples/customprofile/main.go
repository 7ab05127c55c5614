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

func main() {
	os.Exit(bootstrap.Main(os.Args[1:], bootstrap.MergeProfile(NewTally)))
}
