package declarative

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports/mergetest"
)

// TestExampleProfilesConformance runs the merge-profile conformance suite
// for every profile of examples/profiles.yaml.
func TestExampleProfilesConformance(t *testing.T) {
	ps, err := LoadFile("../../examples/profiles.yaml", Options{Reserved: map[string]string{"merge-patch": "built-in"}})
	if err != nil {
		t.Fatal(err)
	}
	js := func(s string) domain.Document { return jsonDoc(s) }
	ptr := func(d domain.Document) *domain.Document { return &d }
	bs := func(d bson.D) domain.Document { return bsonDoc_(t, d) }
	features := map[string]mergetest.Features{
		"counter": {
			Valid: []mergetest.Case{
				{Name: "absent", Intent: js(`{"by":2}`)},
				{Name: "absent, BSON intent", Intent: bs(bson.D{{Key: "by", Value: int32(2)}})},
				{Name: "absent, BSON-only store", Intent: js(`{}`), Accept: []string{domain.ContentTypeBSON}},
				{Name: "add", Current: ptr(js(`{"n":1,"merges":1}`)), Intent: js(`{"by":-3}`)},
				{Name: "add to BSON", Current: ptr(bs(bson.D{{Key: "_id", Value: "x"}, {Key: "n", Value: int64(1)}})), Intent: js(`{"by":2}`)},
			},
			Invalid: []mergetest.Case{
				{Name: "by is not an integer", Current: ptr(js(`{"n":1}`)), Intent: js(`{"by":"x"}`)},
				{Name: "n is not a number", Current: ptr(js(`{"n":"x"}`)), Intent: js(`{"by":1}`)},
			},
		},
		"tally": {
			Valid: []mergetest.Case{
				{Name: "first event", Intent: js(`{"event":"click"}`)},
				{Name: "add", Current: ptr(js(`{"counts":{"click":2}}`)), Intent: js(`{"event":"click","by":3}`)},
			},
			Invalid: []mergetest.Case{
				{Name: "no event", Current: ptr(js(`{"counts":{}}`)), Intent: js(`{"by":1}`)},
				{Name: "not a tally", Current: ptr(js(`{"counts":"x"}`)), Intent: js(`{"event":"a"}`)},
			},
		},
		"latest": {
			Valid: []mergetest.Case{
				{Name: "absent", Intent: js(`{"ts":5,"value":{"a":1}}`)},
				{Name: "newer", Current: ptr(js(`{"value":1,"ts":4}`)), Intent: js(`{"ts":5,"value":2}`)},
				{Name: "older", Current: ptr(js(`{"value":1,"ts":9}`)), Intent: js(`{"ts":5,"value":2}`)},
			},
			Invalid: []mergetest.Case{
				{Name: "no ts", Intent: js(`{"value":2}`)},
			},
		},
		"events": {
			Valid: []mergetest.Case{
				{Name: "absent", Intent: js(`{"type":"login","at":1}`)},
				{Name: "append", Current: ptr(js(`{"events":[{"type":"a","at":null}],"total":1}`)), Intent: js(`{"type":"b"}`)},
			},
			Invalid: []mergetest.Case{
				{Name: "no type", Intent: js(`{"at":1}`)},
				{Name: "events not an array", Current: ptr(js(`{"events":1}`)), Intent: js(`{"type":"a"}`)},
			},
		},
		"order-status": {
			Valid: []mergetest.Case{
				{Name: "absent", Intent: js(`{"status":"paid"}`)},
				{Name: "paid to shipped", Current: ptr(js(`{"status":"paid","history":["paid"]}`)), Intent: js(`{"status":"shipped"}`)},
			},
			Invalid: []mergetest.Case{
				{Name: "new to shipped", Current: ptr(js(`{"status":"new"}`)), Intent: js(`{"status":"shipped"}`)},
				{Name: "unknown status", Intent: js(`{"status":"lost"}`)},
			},
		},
	}
	for _, p := range ps {
		f, ok := features[p.Name()]
		if !ok {
			t.Errorf("example profile %q has no conformance cases: add them here", p.Name())
			continue
		}
		t.Run(p.Name(), func(t *testing.T) { mergetest.Run(t, p, f) })
	}
}
