package main

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sink-io/sink/adapters/declarative"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports"
)

// The "tally" profile of examples/profiles.yaml does what this binary's Go
// profile does, without a custom binary: same documents for the same
// merges, and the same bad intents rejected.
func TestDeclarativeTallyMatchesGo(t *testing.T) {
	ps, err := declarative.LoadFile("../profiles.yaml", declarative.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var decl ports.MergeProfile
	for _, p := range ps {
		if p.Name() == "tally" {
			decl = p
		}
	}
	if decl == nil {
		t.Fatal("examples/profiles.yaml has no tally profile")
	}
	js := func(s string) domain.Document {
		return domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(s)}
	}
	var curGo, curDecl *domain.Document
	for _, intent := range []string{`{"event":"click"}`, `{"event":"click","by":2}`, `{"event":"view","by":5}`, `{"nope":1}`, `{"event":""}`, `{"event":"click","by":-3}`} {
		in := js(intent)
		g, gerr := NewTally().Merge(context.Background(), ports.MergeInput{Current: curGo, Intent: in})
		d, derr := decl.Merge(context.Background(), ports.MergeInput{Current: curDecl, Intent: in})
		if (gerr == nil) != (derr == nil) {
			t.Fatalf("%s: Go error %v, declarative error %v", intent, gerr, derr)
		}
		if gerr != nil {
			if domain.CodeOf(derr) != domain.CodeInvalidArgument {
				t.Fatalf("%s: %v", intent, derr)
			}
			continue
		}
		var gv, dv any
		if json.Unmarshal(g.Data, &gv) != nil || json.Unmarshal(d.Data, &dv) != nil || !reflect.DeepEqual(gv, dv) {
			t.Fatalf("%s: Go %s, declarative %s", intent, g.Data, d.Data)
		}
		curGo, curDecl = &g, &d
	}
	if string(curDecl.Data) != `{"counts":{"click":0,"view":5}}` {
		t.Fatalf("final %s", curDecl.Data)
	}
}
