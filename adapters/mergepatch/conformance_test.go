package mergepatch_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sink-io/sink/adapters/mergepatch"
	"github.com/sink-io/sink/domain"
	"github.com/sink-io/sink/ports/mergetest"
)

func TestMergeProfileConformance(t *testing.T) {
	js := func(s string) domain.Document {
		return domain.Document{ContentType: domain.ContentTypeJSON, Data: []byte(s)}
	}
	bs := func(v any) domain.Document {
		b, err := bson.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return domain.Document{ContentType: domain.ContentTypeBSON, Data: b}
	}
	cur := js(`{"a":1,"b":{"c":2}}`)
	bcur := bs(bson.D{{Key: "_id", Value: "x"}, {Key: "a", Value: int32(1)}})
	mergetest.Run(t, mergepatch.New(), mergetest.Features{
		Valid: []mergetest.Case{
			{Name: "json into absent", Intent: js(`{"a":1}`)},
			{Name: "bson into absent", Intent: bs(bson.D{{Key: "a", Value: int64(2)}})},
			{Name: "json into json", Current: &cur, Intent: js(`{"b":{"c":null,"d":3}}`)},
			{Name: "bson into bson", Current: &bcur, Intent: bs(bson.D{{Key: "a", Value: nil}})},
			{Name: "json into bson", Current: &bcur, Intent: js(`{"z":[1,2]}`)},
			{Name: "json into absent, BSON-only store", Intent: js(`{"a":1}`), Accept: []string{domain.ContentTypeBSON}},
		},
		Invalid: []mergetest.Case{
			{Name: "bson into json", Current: &cur, Intent: bs(bson.D{{Key: "a", Value: 1}})},
			{Name: "bson intent, JSON-only store", Intent: bs(bson.D{{Key: "a", Value: 1}}), Accept: []string{domain.ContentTypeJSON}},
		},
	})
}
