package mongodb

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/sink-io/sink/domain"
)

// keepMarkPipeline, applied to a record as MongoDB evaluates the
// expressions it uses (evalPipeline below, written from MongoDB's
// documentation: $replaceWith, $mergeObjects, $literal, field paths,
// $cond, $eq, $type and $$REMOVE), gives exactly the document a
// replacement carrying the record's mark would store: on a new record
// (an upsert's {_id: key}), on a record without a mark, on one with a mark,
// and on a legacy record whose field of the hidden name is not Sink's.
// The servers the tests run against (FerretDB v1) do not take update
// pipelines, so this is what checks the pipeline's construction there;
// against MongoDB the conformance suite runs through it.
func TestKeepMarkPipelineBuildsTheStoredDocument(t *testing.T) {
	e := encoder{hidden: "__sink", store: "primary"}
	rev := newRevision()
	mark := domain.AppliedMark{Position: domain.SourcePosition{Log: "log", Partition: 1, Offset: 7},
		Recent: []domain.AppliedEntry{{ID: "m1", Revision: revisionToken(newRevision())}}}
	// Client values that look like expressions must be stored as they are.
	client := marshal(t, bson.D{{Key: "z", Value: "$notAPath"}, {Key: "a", Value: bson.D{{Key: "$literal", Value: 1}, {Key: "x.y", Value: "$$REMOVE"}}},
		{Key: "n", Value: int32(3)}, {Key: "l", Value: int64(4)}, {Key: "d", Value: 1.5}, {Key: "arr", Value: bson.A{"$x", bson.D{{Key: "$cond", Value: 1}}}}})
	for _, withID := range []bool{false, true} {
		doc := client
		if withID {
			doc = marshal(t, append(bson.D{{Key: "_id", Value: "k"}}, mustD(t, client)...))
		}
		b, err := e.body(domain.StringKey("k"), domain.Document{ContentType: domain.ContentTypeBSON, Data: doc}, true)
		if err != nil {
			t.Fatal(err)
		}
		pipe := e.keepMarkPipeline(b, rev)
		old := e.assemble(b, true, newRevision(), domain.AppliedMark{})
		cases := map[string]struct {
			record []byte
			mark   domain.AppliedMark
		}{
			"upsert creates":     {marshal(t, bson.D{{Key: "_id", Value: "k"}}), domain.AppliedMark{}},
			"record without one": {old, domain.AppliedMark{}},
			"record with a mark": {e.assemble(b, true, newRevision(), mark), mark},
			"legacy, foreign hidden field": {marshal(t, bson.D{{Key: "_id", Value: "k"}, {Key: "old", Value: 1},
				{Key: "__sink", Value: bson.A{bson.D{{Key: "m", Value: bson.D{{Key: "l", Value: "x"}}}}}}}), domain.AppliedMark{}},
			"legacy, scalar hidden field": {marshal(t, bson.D{{Key: "_id", Value: "k"}, {Key: "__sink", Value: 5}}), domain.AppliedMark{}},
		}
		for name, c := range cases {
			got := evalPipeline(t, pipe, c.record)
			want := e.assemble(b, true, rev, c.mark)
			if !bytes.Equal(got, want) {
				t.Errorf("withID=%v, %s:\n got %v\nwant %v", withID, name, bson.Raw(got), bson.Raw(want))
			}
		}
	}
	// The hidden field's name is the configured one.
	e2 := encoder{hidden: "meta_x", store: "primary"}
	pipe := e2.keepMarkPipeline(body{fields: nil, idAdded: true}, rev)
	if !strings.Contains(bson.Raw(pipe).String(), `"$meta_x.m"`) || strings.Contains(bson.Raw(pipe).String(), "__sink") {
		t.Fatalf("pipeline %v does not use the configured hidden field", bson.Raw(pipe))
	}
}

func mustD(t *testing.T, raw []byte) bson.D {
	t.Helper()
	var d bson.D
	if err := bson.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// evalPipeline applies a one-stage {$replaceWith: expr} pipeline to doc.
func evalPipeline(t *testing.T, pipe pipeline, doc []byte) []byte {
	t.Helper()
	stages, err := bsoncore.Array(pipe).Values()
	if err != nil || len(stages) != 1 {
		t.Fatalf("pipeline %v: want one stage", bsoncore.Array(pipe))
	}
	stage := stages[0].Document()
	expr, err := stage.LookupErr("$replaceWith")
	if err != nil {
		t.Fatalf("stage %v is not $replaceWith", stage)
	}
	v, ok := eval(t, expr, bsoncore.Document(doc))
	if !ok || v.Type != bsoncore.TypeEmbeddedDocument {
		t.Fatalf("$replaceWith gave %v", v)
	}
	return v.Data
}

// eval evaluates an aggregation expression against root; ok is false for
// "missing" (a field path to nothing, $$REMOVE).
func eval(t *testing.T, expr bsoncore.Value, root bsoncore.Document) (bsoncore.Value, bool) {
	t.Helper()
	switch expr.Type {
	case bsoncore.TypeString:
		s := expr.StringValue()
		switch {
		case s == "$$REMOVE":
			return bsoncore.Value{}, false
		case strings.HasPrefix(s, "$$"):
			t.Fatalf("variable %s not modelled", s)
		case strings.HasPrefix(s, "$"):
			v, err := root.LookupErr(strings.Split(s[1:], ".")...)
			// A path through an array maps over it in MongoDB; model that
			// as "an array" (the pipeline must not carry it either way).
			if err != nil {
				if arr, aerr := root.LookupErr(strings.Split(s[1:], ".")[0]); aerr == nil && arr.Type == bsoncore.TypeArray {
					return bsoncore.Value{Type: bsoncore.TypeArray, Data: bsoncore.NewArrayBuilder().Build()}, true
				}
				return bsoncore.Value{}, false
			}
			return v, true
		}
		return expr, true
	case bsoncore.TypeArray:
		vals, _ := expr.Array().Values()
		ab := bsoncore.NewArrayBuilder()
		for _, v := range vals {
			if r, ok := eval(t, v, root); ok {
				ab.AppendValue(r)
			}
		}
		return bsoncore.Value{Type: bsoncore.TypeArray, Data: ab.Build()}, true
	case bsoncore.TypeEmbeddedDocument:
	default:
		return expr, true
	}
	elems, _ := expr.Document().Elements()
	if len(elems) == 1 && strings.HasPrefix(elems[0].Key(), "$") {
		arg := elems[0].Value()
		args := func() []bsoncore.Value {
			vals, _ := arg.Array().Values()
			return vals
		}
		switch elems[0].Key() {
		case "$literal":
			return arg, true
		case "$mergeObjects":
			var keys []string
			fields := map[string]bsoncore.Value{}
			for _, a := range args() {
				r, ok := eval(t, a, root)
				if !ok || r.Type == bsoncore.TypeNull {
					continue
				}
				if r.Type != bsoncore.TypeEmbeddedDocument {
					t.Fatalf("$mergeObjects of a %s", r.Type)
				}
				es, _ := r.Document().Elements()
				for _, el := range es {
					if _, seen := fields[el.Key()]; !seen {
						keys = append(keys, el.Key())
					}
					fields[el.Key()] = el.Value()
				}
			}
			db := bsoncore.NewDocumentBuilder()
			for _, k := range keys {
				db.AppendValue(k, fields[k])
			}
			return bsoncore.Value{Type: bsoncore.TypeEmbeddedDocument, Data: db.Build()}, true
		case "$type":
			r, ok := eval(t, arg, root)
			name := "missing"
			if ok {
				name = typeName(r.Type)
			}
			return bsoncore.Value{Type: bsoncore.TypeString, Data: bsoncore.AppendString(nil, name)}, true
		case "$eq":
			a := args()
			x, okx := eval(t, a[0], root)
			y, oky := eval(t, a[1], root)
			eq := okx == oky && x.Type == y.Type && bytes.Equal(x.Data, y.Data)
			return bsoncore.Value{Type: bsoncore.TypeBoolean, Data: bsoncore.AppendBoolean(nil, eq)}, true
		case "$cond":
			a := args()
			c, _ := eval(t, a[0], root)
			if c.Boolean() {
				return eval(t, a[1], root)
			}
			return eval(t, a[2], root)
		}
		t.Fatalf("operator %s not modelled", elems[0].Key())
	}
	// An expression object: its fields evaluated, missing ones left out.
	db := bsoncore.NewDocumentBuilder()
	for _, el := range elems {
		if r, ok := eval(t, el.Value(), root); ok {
			db.AppendValue(el.Key(), r)
		}
	}
	return bsoncore.Value{Type: bsoncore.TypeEmbeddedDocument, Data: db.Build()}, true
}

// Only the server's own refusal settles that it takes no update pipelines;
// a failure to get an answer, or the driver's own error, decides nothing.
func TestRefusedIsOnlyTheServersAnswer(t *testing.T) {
	cases := map[string]struct {
		err  error
		want bool
	}{
		"FerretDB's TypeMismatch": {mongo.CommandError{Code: 14, Name: "TypeMismatch"}, true},
		"an unknown stage":        {mongo.CommandError{Code: 40324, Name: "Location40324"}, true},
		"a write error":           {mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 9, Message: "FailedToParse"}}}, true},
		"shutting down":           {mongo.CommandError{Code: 91, Name: "ShutdownInProgress"}, false},
		"not primary":             {mongo.CommandError{Code: 10107, Name: "NotWritablePrimary"}, false},
		"a network error":         {mongo.CommandError{Code: 9001, Labels: []string{"NetworkError"}}, false},
		"unauthorized":            {mongo.CommandError{Code: 13, Name: "Unauthorized"}, false},
		"a timeout":               {context.DeadlineExceeded, false},
		"the driver's own error":  {errors.New("update document must contain key beginning with '$'"), false},
	}
	for name, c := range cases {
		if got := refused(c.err); got != c.want {
			t.Errorf("%s: refused = %v, want %v", name, got, c.want)
		}
	}
}
