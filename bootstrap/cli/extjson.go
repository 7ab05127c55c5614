package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// maxRenderDepth bounds the nesting the renderer walks (MongoDB itself
// refuses documents nested deeper than 100 levels).
const maxRenderDepth = 200

// bsonToJSON renders a BSON document as Extended JSON that reads back as
// the same BSON: relaxed Extended JSON (plain numbers, ISO dates), except
// for the values whose relaxed form another JSON reader would take for a
// different type. An int64 prints as {"$numberLong":"7"} (relaxed 7 reads
// back as an int32) and a double without a fractional part as
// {"$numberDouble":"1.0"} (JSON tools such as jq print 1.0 as 1, an int32).
// So int32 values and doubles with a fraction stay plain numbers, and
// `sink put --bson` of the printed document, even after jq, stores the same
// types. canonical renders every value in canonical Extended JSON.
func bsonToJSON(b []byte, canonical bool) (json.RawMessage, error) {
	if err := bson.Raw(b).Validate(); err != nil {
		return nil, fmt.Errorf("cannot render the BSON document as JSON: %w", err)
	}
	var v any = bson.Raw(b)
	if !canonical {
		d, err := typedDocument(bson.Raw(b), 0)
		if err != nil {
			return nil, err
		}
		v = d
	}
	out, err := bson.MarshalExtJSON(v, canonical, false)
	if err != nil {
		return nil, fmt.Errorf("cannot render the BSON document as JSON: %w", err)
	}
	return out, nil
}

// typedDocument copies a document, replacing the values whose relaxed
// Extended JSON form loses their type by their canonical form, spelled as
// a sub-document ({"$numberLong": "7"}), which relaxed output prints as is.
// Every other value stays the original raw value.
func typedDocument(doc bson.Raw, depth int) (bson.D, error) {
	elems, err := doc.Elements()
	if err != nil {
		return nil, fmt.Errorf("cannot render the BSON document as JSON: %w", err)
	}
	d := make(bson.D, 0, len(elems))
	for _, e := range elems {
		v, err := typedValue(e.Value(), depth)
		if err != nil {
			return nil, err
		}
		d = append(d, bson.E{Key: e.Key(), Value: v})
	}
	return d, nil
}

func typedValue(v bson.RawValue, depth int) (any, error) {
	switch v.Type {
	case bson.TypeInt64:
		return bson.D{{Key: "$numberLong", Value: strconv.FormatInt(v.Int64(), 10)}}, nil
	case bson.TypeDouble:
		f := v.Double()
		if math.IsInf(f, 0) || math.IsNaN(f) || f != math.Trunc(f) {
			return v, nil // relaxed prints a fraction, or already {"$numberDouble": "NaN"}
		}
		s := strconv.FormatFloat(f, 'g', -1, 64)
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		return bson.D{{Key: "$numberDouble", Value: s}}, nil
	case bson.TypeEmbeddedDocument, bson.TypeArray:
		if depth >= maxRenderDepth {
			return nil, fmt.Errorf("cannot render the BSON document as JSON: nested deeper than %d levels", maxRenderDepth)
		}
		if v.Type == bson.TypeEmbeddedDocument {
			return typedDocument(v.Document(), depth+1)
		}
		vals, err := v.Array().Values()
		if err != nil {
			return nil, fmt.Errorf("cannot render the BSON document as JSON: %w", err)
		}
		a := make(bson.A, 0, len(vals))
		for _, e := range vals {
			x, err := typedValue(e, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, x)
		}
		return a, nil
	default:
		return v, nil
	}
}
