package cli

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// allTypes is a document with every BSON type whose Extended JSON could
// lose it, nested in documents and arrays.
func allTypes(t *testing.T) []byte {
	t.Helper()
	dec, err := bson.ParseDecimal128("1.50")
	if err != nil {
		t.Fatal(err)
	}
	oid, err := bson.ObjectIDFromHex("65a1f0c2e4b0a1b2c3d4e5f6")
	if err != nil {
		t.Fatal(err)
	}
	doc := bson.D{
		{Key: "i32", Value: int32(3)}, {Key: "i64", Value: int64(7)}, {Key: "i64neg", Value: int64(-1)},
		{Key: "i64big", Value: int64(1) << 40}, {Key: "i32max", Value: int32(math.MaxInt32)},
		{Key: "d", Value: 1.0}, {Key: "dfrac", Value: 2.5}, {Key: "dtiny", Value: 1.1e-7}, {Key: "dbig", Value: 1e20},
		{Key: "dnegzero", Value: math.Copysign(0, -1)}, {Key: "nan", Value: math.NaN()}, {Key: "inf", Value: math.Inf(-1)},
		{Key: "date", Value: bson.NewDateTimeFromTime(time.Date(2024, 1, 2, 3, 4, 5, 6e6, time.UTC))},
		{Key: "olddate", Value: bson.DateTime(-1e13)}, {Key: "dec", Value: dec},
		{Key: "bin", Value: bson.Binary{Subtype: 4, Data: []byte("0123456789abcdef")}}, {Key: "ts", Value: bson.Timestamp{T: 1, I: 2}},
		{Key: "re", Value: bson.Regex{Pattern: "a<b", Options: "i"}}, {Key: "min", Value: bson.MinKey{}}, {Key: "null", Value: nil},
		{Key: "oid", Value: oid}, {Key: "s", Value: "<&>"}, {Key: "b", Value: true},
		{Key: "arr", Value: bson.A{int64(1), int32(2), 2.5, 4.0, bson.A{int64(5)}}},
		{Key: "sub", Value: bson.D{{Key: "x", Value: int64(-1)}, {Key: "y", Value: bson.D{{Key: "z", Value: 0.0}}}}},
	}
	b, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// What read prints, put --bson stores as the same BSON, byte for byte, in
// both output forms.
func TestBSONToJSONRoundTrips(t *testing.T) {
	raw := allTypes(t)
	for _, canonical := range []bool{false, true} {
		j, err := bsonToJSON(raw, canonical)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonToBSON(j)
		if err != nil {
			t.Fatalf("canonical=%v: %v\n%s", canonical, err, j)
		}
		if !bytes.Equal(doc.Data, raw) {
			t.Errorf("canonical=%v: the printed document reads back as other BSON:\nprinted %s\nwant    %s\ngot     %s", canonical, j, bson.Raw(raw), bson.Raw(doc.Data))
		}
	}
}

// The default form stays readable: plain numbers where the type survives,
// typed forms only where it would not.
func TestBSONToJSONTypesOnlyWhatRelaxedLoses(t *testing.T) {
	j, err := bsonToJSON(allTypes(t), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"i32":3,`, `"i64":{"$numberLong":"7"}`, `"i64neg":{"$numberLong":"-1"}`, `"i64big":{"$numberLong":"1099511627776"}`,
		`"d":{"$numberDouble":"1.0"}`, `"dfrac":2.5,`, `"dbig":{"$numberDouble":"1e+20"}`, `"dnegzero":{"$numberDouble":"-0.0"}`,
		`"nan":{"$numberDouble":"NaN"}`, `"inf":{"$numberDouble":"-Infinity"}`, `"date":{"$date":"2024-01-02T03:04:05.006Z"}`,
		`"arr":[{"$numberLong":"1"},2,2.5,{"$numberDouble":"4.0"},[{"$numberLong":"5"}]]`,
		`"sub":{"x":{"$numberLong":"-1"},"y":{"z":{"$numberDouble":"0.0"}}}`, `"s":"<&>"`,
	} {
		if !strings.Contains(string(j), want) {
			t.Errorf("output lacks %s:\n%s", want, j)
		}
	}
	c, err := bsonToJSON(allTypes(t), true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(c), `"i32":{"$numberInt":"3"}`) {
		t.Errorf("canonical output does not type int32:\n%s", c)
	}
}

func TestBSONToJSONBoundsNesting(t *testing.T) {
	doc := bson.D{{Key: "v", Value: int64(1)}}
	for range maxRenderDepth + 1 {
		doc = bson.D{{Key: "a", Value: doc}}
	}
	b, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bsonToJSON(b, false); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("a document nested %d levels: %v, want an error", maxRenderDepth+2, err)
	}
	if _, err := bsonToJSON([]byte{5, 0, 0}, false); err == nil {
		t.Fatal("a truncated document rendered without an error")
	}
}
